"""analysis/: synthetic run directories with hand-computed metrics -> tables, markdown, figures, report, callback."""

import logging
import math
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from hydra.experimental.callback import Callback
from hydra.utils import instantiate
from omegaconf import OmegaConf

from analysis.callback import ReportOnSweepEnd
from analysis.figures import figures
from analysis.load import load
from analysis.report import main
from analysis.tables import all_tables, best_shapes
from helpers.config import CONF
from helpers.runs import HOT, one, record, section, write_run

COOL = {**HOT, "temperature": 0.5}
def ar(root: Path, name: str, wall: float, scores: tuple[float, float], accuracy: float, sampling: dict = HOT) -> None:
    recs = [record(f"p{i}", [0] * 8, wall, s, 0, 0) for i, s in enumerate(scores)]
    write_run(root, name, "ar", {}, "none", None, None, recs, accuracy, sampling)


def sd(root: Path, name: str, length: int, steps: tuple[list[int], list[int]], walls: tuple[float, float],
       accuracy: float, sampling: dict = HOT, complete: bool = True, extra: dict | None = None) -> Path:
    recs = [record(f"p{i}", a, w, 50.0 + 10 * i, length, length) for i, (a, w) in enumerate(zip(steps, walls))]
    return write_run(root, name, "sd", {"draft_length": length}, f"L{length}", "fixed_length", length, recs, accuracy,
                     sampling, complete, extra)


def rsd_c(root: Path, name: str, branching: list[int], steps: tuple[list[int], list[int]], accuracy: float) -> None:
    depth = len(branching)
    recs = [record(f"p{i}", a, 1.0, 50.0, depth, depth) for i, a in enumerate(steps)]
    tag = "b" + "-".join(map(str, branching))
    write_run(root, name, "rsd_c", {"branching": branching}, tag, "fixed_compute", 6, recs, accuracy)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """Setting HOT: AR, SD at L=2 and L=3, RSD-C with two shapes at B=6, an unfinished SD L=4; setting COOL: AR, SD."""
    root = tmp_path_factory.mktemp("sweep")
    ar(root / "hot", "ar", 2.0, (40.0, 60.0), 50.0)  # BE 1, 16 tokens / 4 s = 4 tok/s
    sd(root / "hot", "sd2", 2, ([2, 1, 1, 0], [1, 1, 1, 0, 0]), (1.0, 1.5), 55.0)  # 16 tokens, 9 calls, 2.5 s
    sd(root / "hot", "sd3", 3, ([3, 2, 0], [2, 1, 1, 0]), (1.0, 1.0), 45.0)  # 16 tokens, 7 calls, 2 s
    rsd_c(root / "hot", "b22", [2, 2], ([2, 1, 1, 0], [1, 2, 0, 1]), 48.0)  # BE 2
    rsd_c(root / "hot", "b211", [2, 1, 1], ([3, 2, 0], [2, 2, 1]), 52.0)  # BE 8/3: the best shape
    sd(root / "hot", "sd4-unfinished", 4, ([4, 3], [4, 3]), (1.0, 1.0), 50.0, complete=False)
    ar(root / "cool", "ar", 1.6, (30.0, 30.0), 30.0, COOL)  # 5 tok/s
    sd(root / "cool", "sd2", 2, ([2, 2, 1], [2, 2, 1]), (0.8, 0.8), 33.0, COOL)  # 10 tok/s
    return root


@pytest.fixture(scope="module")
def tables(sweep):
    return load([sweep])


def test_run_metrics_equal_hand_computed_values(tables):
    runs = tables.runs
    assert len(runs) == 7
    sd2 = one(runs, method="sd", x=2, temperature=1.0)
    assert sd2.block_efficiency == pytest.approx(16 / 9)
    assert sd2.mbsu == pytest.approx((16 / 9) / (1 + 2 * 0.1))  # L = 18 draft calls / 9 target calls
    assert sd2.token_rate == pytest.approx(6.4)
    assert sd2.token_rate_ratio == pytest.approx(6.4 / 4)
    assert sd2.accuracy_ratio == pytest.approx(55 / 50)
    assert (sd2.accept_d1, sd2.accept_d2) == pytest.approx((6 / 9, 1 / 9))
    assert (sd2.frac_draft, sd2.frac_target, sd2.frac_other) == pytest.approx((0.25, 0.5, 0.25))
    assert (sd2.budget, sd2.shape_tag, sd2.prompts) == ("fixed_length", "L2", 2)
    sd3 = one(runs, method="sd", x=3)
    assert sd3.mbsu == pytest.approx((16 / 7) / 1.3)
    assert (sd3.token_rate_ratio, sd3.accuracy_ratio) == pytest.approx((2.0, 0.9))
    assert one(runs, method="rsd_c", shape_tag="b2-1-1").x == 6  # x = target tokens at fixed_compute
    ar_row = one(runs, method="ar", temperature=1.0)
    assert pd.isna(ar_row.x) and (ar_row.mbsu, ar_row.token_rate_ratio, ar_row.accuracy_ratio) == (1.0, 1.0, 1.0)


def test_prompt_and_step_tables(tables):
    p1 = one(tables.prompts, method="sd", x=2, temperature=1.0, prompt_id="p1")
    assert p1.block_efficiency == pytest.approx(8 / 5)
    assert p1.mbsu == pytest.approx(1.6 / 1.2)
    assert p1.token_rate == pytest.approx(8 / 1.5)
    assert p1.token_rate_ratio == pytest.approx((8 / 1.5) / 4)
    assert p1.accuracy_ratio == pytest.approx(60 / 50)
    steps = tables.steps[(tables.steps.method == "sd") & (tables.steps.x == 2) & (tables.steps.temperature == 1.0)]
    assert len(steps) == 9
    last = one(steps, prompt_id="p1", step=5)
    assert (last.accepted_length, last.tokens_verified) == (0, 4)


def test_incomplete_run_is_skipped_with_a_warning_naming_it(sweep, caplog):
    with caplog.at_level(logging.WARNING):
        runs = load([sweep]).runs
    assert "sd4-unfinished" in caplog.text and "incomplete" in caplog.text
    assert not runs.run_dir.str.contains("unfinished").any() and 4 not in set(runs.x.dropna())


def test_sampling_settings_are_not_mixed(tables):
    cool = one(tables.runs, method="sd", temperature=0.5)
    assert cool.token_rate_ratio == pytest.approx(10 / 5)  # vs its own AR (5 tok/s), not the T=1 AR (4 tok/s)
    assert cool.accuracy_ratio == pytest.approx(33 / 30)
    best = best_shapes(tables.runs, tables.prompts)
    assert len(best[(best.method == "sd") & (best.x == 2)]) == 2  # one cell per setting, never averaged
    text = all_tables(tables.runs, tables.prompts)["block_efficiency"]
    assert text.count("### ") == 3  # HOT fixed_length, HOT fixed_compute, COOL fixed_length
    cool_table = section(text, "T = 0.5")
    assert "| SD | 2.67 ± 0.00 |" in cool_table and "| AR | 1.00 ± 0.00 |" in cool_table and "L=3" not in cool_table


def test_best_shape_is_selected_labelled_and_the_protocol_stated(tables):
    md = all_tables(tables.runs, tables.prompts)
    fixed_compute = section(md["block_efficiency"], "T = 1,", "fixed target compute")
    assert "| RSD-C | 2.67 ± 0.00 (b2-1-1, best of 2†) |" in fixed_compute
    assert "| AR | 1.00 ± 0.00 |" in fixed_compute
    assert "best of them chosen on the same prompts this table reports, which is biased upward" in fixed_compute
    assert f"| RSD-C | {(8 / 3) / 1.3:.2f} ± 0.00 (b2-1-1, best of 2†) |" in md["mbsu"]
    assert "The shape is the one of the block-efficiency table." in md["mbsu"]
    best = one(best_shapes(tables.runs, tables.prompts), method="rsd_c")
    assert best.selection == "best of 2 shapes on these prompts by measured block efficiency (biased upward)"
    fixed_length = section(md["block_efficiency"], "T = 1,", "fixed draft length")
    assert "| method | L=2 | L=3 |" in fixed_length and "†" not in fixed_length  # one shape per point: no choice
    assert "| AR | 1.00 ± 0.00 | 1.00 ± 0.00 |" in fixed_length
    # a cell is the mean of per-prompt ratios (8/4 and 8/5 at L=2; 8/3 and 8/4 at L=3), not the run's 16/9 and 16/7
    assert f"| SD | {(8 / 4 + 8 / 5) / 2:.2f} ± 0.20 | {(8 / 3 + 8 / 4) / 2:.2f} ± 0.33 |" in fixed_length
    assert "| RSD-C |" not in fixed_length


def test_missing_ar_gives_nan_ratios_and_a_warning(tmp_path, caplog):
    sd(tmp_path, "sd2", 2, ([2, 1, 1, 0], [1, 1, 1, 0, 0]), (1.0, 1.5), 55.0)
    with caplog.at_level(logging.WARNING):
        runs = load([tmp_path]).runs
    assert "no AR run" in caplog.text and "pairA" in caplog.text
    assert math.isnan(runs.token_rate_ratio[0]) and math.isnan(runs.accuracy_ratio[0])


def test_tuning_runs_without_ar_are_not_warned_about(tmp_path, caplog):
    tuning = {"selection": {"role": "tune", "prompts": ["p0", "p1"], "selected_by": "expected_block_efficiency"}}
    sd(tmp_path, "sd2", 2, ([2, 1, 1, 0], [1, 1, 1, 0, 0]), (1.0, 1.5), 55.0, extra=tuning)
    with caplog.at_level(logging.WARNING):
        runs = load([tmp_path]).runs
    assert runs.selection_role[0] == "tune" and math.isnan(runs.token_rate_ratio[0])
    assert "no AR run" not in caplog.text


def labelled_lines(ax) -> list[str]:
    return [line.get_label() for line in ax.lines if not line.get_label().startswith("_")]


def test_figures_have_the_paper_layout(tables):
    figs = dict(figures(tables))
    assert len(figs) == 6  # (HOT: 2 budget kinds, COOL: 1) x (four-panel, acceptance)
    hot = "pairA_dolly_builtin_T1-k0-p1-n8"
    fixed_length = figs[f"{hot}_fixed_length"]
    assert [ax.get_title() for ax in fixed_length.axes] == ["Block efficiency", "MBSU", "Token rate",
                                                            "Accuracy (ROUGE-L)"]
    assert "pairA, Dolly-style prompts, 2 prompts p0..p1 #" in fixed_length._suptitle.get_text()
    assert "T = 1, 8 new tokens" in fixed_length._suptitle.get_text()
    for ax in fixed_length.axes:
        assert ax.get_xlabel() == "draft length L (tokens)" and ax.get_ylabel()
        assert labelled_lines(ax) == ["AR", "SD"]
    assert "×" in fixed_length.axes[2].get_ylabel() and len(fixed_length.legends) == 1
    sd_line = fixed_length.axes[0].lines[1]
    assert list(sd_line.get_xdata()) == [2, 3] and list(sd_line.get_ydata()) == pytest.approx([1.8, 7 / 3])
    for ax in figs[f"{hot}_fixed_compute"].axes:
        assert ax.get_xlabel().startswith("target budget B") and labelled_lines(ax) == ["AR", "RSD-C"]
    [panel] = figs[f"{hot}_fixed_compute_acceptance"].axes
    [line] = [fig_line for fig_line in panel.lines if fig_line.get_label() == "RSD-C"]
    assert line.get_label() == "RSD-C" and list(line.get_ydata()) == pytest.approx([5 / 6, 4 / 6, 1 / 6])
    assert [labelled_lines(ax) for ax in figs[f"{hot}_fixed_length_acceptance"].axes] == [["SD"], ["SD"]]
    colours = {fig_line.get_color() for f in figs.values() for ax in f.axes for fig_line in ax.lines
               if fig_line.get_label() == "SD"}
    assert len(colours) == 1


def test_error_bars_are_standard_errors_over_prompts(tables):
    best = best_shapes(tables.runs, tables.prompts)
    sd2 = one(best, method="sd", x=2, temperature=1.0)
    assert sd2.block_efficiency_se == pytest.approx(abs(2.0 - 1.6) / 2)  # two prompts: |a - b| / 2
    assert sd2.block_efficiency_ci == pytest.approx(12.706 * 0.2, rel=1e-4)  # 95% t interval, 1 degree of freedom
    assert sd2.token_rate_ratio_se == pytest.approx(abs(8.0 - 8 / 1.5) / 2 / 4)


def test_cli_writes_tables_markdown_and_figures(sweep, tmp_path, capsys):
    assert main([str(sweep), "--out", str(tmp_path / "report")]) == 0
    out = capsys.readouterr().out
    assert "best of 2†" in out and str(tmp_path / "report") in out
    runs = pd.read_parquet(tmp_path / "report" / "runs.parquet")
    assert len(runs) == 7 and len(pd.read_csv(tmp_path / "report" / "prompts.csv")) == 14
    assert (tmp_path / "report" / "steps.parquet").exists()
    assert "RSD-C" in (tmp_path / "report" / "table_block_efficiency.md").read_text()
    assert len(list((tmp_path / "report" / "figures").glob("*.png"))) == 6
    assert len(list((tmp_path / "report" / "figures").glob("*.pdf"))) == 6


def test_callback_prints_the_report_and_survives_a_failure(tmp_path, capsys):
    ar(tmp_path / "runs", "ar", 2.0, (40.0, 60.0), 50.0)
    sd(tmp_path / "runs", "sd2", 2, ([2, 1, 1, 0], [1, 1, 1, 0, 0]), (1.0, 1.5), 55.0)
    rsd_c(tmp_path / "runs", "b2", [2], ([2, 2, 1, 1], [2, 1, 0, 1]), 50.0)
    ReportOnSweepEnd().on_multirun_end(OmegaConf.create({"out_dir": str(tmp_path / "runs")}))
    out = capsys.readouterr().out
    assert "Rankings" in out and "B=6: RSD-C  [ranked by measured BE]" in out  # one method at B = 6: nothing to test
    assert "| SD | 1.80 ± 0.20 |" in out and f"report: {tmp_path / 'runs' / 'report'}" in out
    assert (tmp_path / "runs" / "report" / "runs.parquet").exists()
    (tmp_path / "empty").mkdir()
    ReportOnSweepEnd().on_multirun_end(OmegaConf.create({"out_dir": str(tmp_path / "empty")}))
    assert "the sweep finished" in capsys.readouterr().out


def test_quickstart_registers_the_callback_and_keeps_its_sweep():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=quickstart"], return_hydra_config=True)
    assert isinstance(instantiate(cfg.hydra.callbacks.report), Callback)
    assert cfg.hydra.sweeper.params.drafter == "ar,sd,bv,pld,specinfer,spectr,rsd_c,tv,rsd_s"
