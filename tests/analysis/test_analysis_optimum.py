"""analysis/ on the new instruments: the root optimum (table_optimum.md and its figure), the acceptance dial (speed
omitted, mixes never pooled, the dial figure) and the model-free PLD drafter. Synthetic run directories, as in
tests/analysis/test_analysis.py."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from analysis.columns import OPTIMUM
from analysis.figures import figures
from analysis.load import load
from analysis.names import method_label, method_order
from analysis.pair_tables import pairs_markdown
from analysis.pairs import all_pairs
from analysis.report import build_report
from analysis.rows import run_row
from analysis.tables import all_tables, best_shapes, optimum_table
from helpers.runs import one, record, section, write_run

DIAL = {"name": "tiny_llama_dial", "mix": 0.6}
T975 = float(sps.t.ppf(0.975, 1))  # two prompts: one degree of freedom


def root(rec: dict, optimum: list, acceptance: list) -> dict:
    """`rec` with per-step root optimum and acceptance (None: a step without root candidates)."""
    return {**rec, "root_optimum": optimum, "root_acceptance": acceptance}


def chain(root_dir: Path, name: str, method: str, length: int, steps: list[list[int]], roots: list | None = None,
          pair: dict | None = None, draft_calls_per_step: int | None = None, wall: float = 1.0) -> Path:
    """A chain method's run at fixed draft length `length` (roots: per prompt (optimum, acceptance) lists)."""
    per_step = length if draft_calls_per_step is None else draft_calls_per_step
    recs = [record(f"p{i}", a, wall, 50.0, per_step, length) for i, a in enumerate(steps)]
    if roots is not None:
        recs = [root(r, *o) for r, o in zip(recs, roots)]
    return write_run(root_dir, name, method, {"draft_length": length}, f"L{length}", "fixed_length", length, recs,
                     50.0, pair=pair, draft_params=0 if per_step == 0 else 100)


def ar(root_dir: Path, name: str, pair: dict | None = None) -> Path:
    recs = [record(f"p{i}", [0] * 8, 2.0, 50.0, 0, 0) for i in range(2)]
    return write_run(root_dir, name, "ar", {}, "none", None, None, recs, 50.0, pair=pair)


SD_ROOTS = [([0.5, 0.5, 1.0, 1.0], [0.25, 0.25, 0.5, 0.5]),  # p0: acceptance 0.375, optimum 0.75, fraction 0.5
            ([1.0, 1.0, 1.0, 1.0, None], [0.5, 0.5, 0.5, 0.5, None])]  # p1: 0.5, 1.0, 0.5; its last step has none


@pytest.fixture(scope="module")
def optimum_runs(tmp_path_factory) -> Path:
    """AR; SD at L=2 with root values; SD at L=3 from before they were recorded; PLD at L=2 (no draft model)."""
    root_dir = tmp_path_factory.mktemp("optimum")
    ar(root_dir, "ar")
    chain(root_dir, "sd2", "sd", 2, [[2, 1, 1, 0], [1, 1, 1, 0, 0]], SD_ROOTS)
    chain(root_dir, "sd3", "sd", 3, [[3, 2, 0], [2, 1, 1, 0]])
    chain(root_dir, "pld2", "pld", 2, [[2, 0], [0, 0, 1]], [([0.2, None], [0.2, None]), ([None] * 3, [None] * 3)],
          draft_calls_per_step=0)
    return root_dir


def test_root_optimum_is_read_per_run_prompt_and_step(optimum_runs):
    tables = load([optimum_runs])
    sd2 = one(tables.runs, method="sd", x=2)
    assert (sd2.root_acceptance, sd2.root_optimum, sd2.fraction_of_optimum) == pytest.approx((3.5 / 8, 7 / 8, 0.5))
    p0 = one(tables.prompts, method="sd", x=2, prompt_id="p0")
    assert (p0.root_acceptance, p0.root_optimum, p0.fraction_of_optimum) == pytest.approx((0.375, 0.75, 0.5))
    last = one(tables.steps, method="sd", x=2, prompt_id="p1", step=5)
    assert np.isnan(last.root_optimum) and np.isnan(last.root_acceptance)
    old = one(tables.runs, method="sd", x=3)
    assert np.isnan([old.root_acceptance, old.root_optimum, old.fraction_of_optimum]).all()


def test_a_summary_from_before_the_optimum_gives_nan_not_an_error(optimum_runs):
    run_dir = optimum_runs / "sd3"
    summary = json.loads((run_dir / "summary.json").read_text())
    older = {k: v for k, v in summary.items() if k not in OPTIMUM}
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    row = run_row(run_dir, older, records)
    assert np.isnan([row[k] for k in OPTIMUM]).all() and row["block_efficiency"] == summary["block_efficiency"]


def test_optimum_table_gives_ci_over_prompts_and_dashes_for_runs_without_it(optimum_runs):
    tables = load([optimum_runs])
    text = optimum_table(best_shapes(tables.runs, tables.prompts))
    acceptance = section(text, "Root acceptance", "fixed draft length")
    half = T975 * abs(0.5 - 0.375) / 2  # 95% t half-width over the two prompts' acceptances
    assert "| method | L=2 | L=3 |" in acceptance
    assert f"| SD | {3.5 / 8:.2f} ± {half:.2f} | – |" in acceptance  # L=3 ran before the optimum was recorded
    assert "| AR |" not in acceptance and "95% t interval" in acceptance
    optimum = section(text, "Root optimum alpha*")
    assert f"| SD | {7 / 8:.2f} ± {T975 * 0.25 / 2:.2f} | – |" in optimum
    fraction = section(text, "Fraction of the optimum")
    assert "| SD | 0.50 ± 0.00 | – |" in fraction
    assert "| PLD | 1.00 ± 0.00 | – |" in fraction  # its one step with a match: a one-hot draft, exactly optimal


def test_optimum_figure_is_readable_without_the_code(optimum_runs):
    figs = dict(figures(load([optimum_runs])))
    [stem] = [s for s in figs if s.endswith("_optimum")]
    fig = figs[stem]
    [ax] = fig.axes
    assert "draft length L" in ax.get_xlabel() and "alpha*" in ax.get_ylabel()
    title = fig._suptitle.get_text()
    assert "Fraction of the optimum" in title and "largest probability that any lossless verifier" in title
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[1:] == ["PLD", "SD"] and "alpha*" in labels[0]
    [sd_line] = [line for line in ax.lines if line.get_label() == "SD"]
    assert list(sd_line.get_ydata()) == pytest.approx([0.5])  # only L=2 records it


def test_pld_is_a_builtin_with_no_draft_model(optimum_runs):
    assert method_label("pld") == "PLD" and method_order(["sd", "pld", "ar", "mine"]) == ["ar", "pld", "sd", "mine"]
    tables = load([optimum_runs])
    pld = one(tables.runs, method="pld")
    assert (pld.draft_params, pld.draft_calls) == (0, 0) and pld.mbsu == pytest.approx(pld.block_efficiency)
    md = all_tables(tables.runs, tables.prompts)
    prompt_mean = tables.prompts[tables.prompts.method == "pld"].block_efficiency.mean()  # the run's: 8 / 5 calls
    assert re.search(rf"\| AR \|.*\n\| PLD \| {prompt_mean:.2f} ± ", md["block_efficiency"])
    assert f"| PLD | {prompt_mean:.2f} ± " in md["mbsu"]
    figs = dict(figures(tables))
    assert any(line.get_label() == "PLD" for f in figs.values() for ax in f.axes for line in ax.lines)


# --- the acceptance dial ----------------------------------------------------------------------------------------

def dial_pair(mix: float) -> dict:
    return {**DIAL, "mix": mix}


@pytest.fixture(scope="module")
def dial_runs(tmp_path_factory) -> Path:
    """The dial at mixes 0 and 0.6: AR, SD and SpecInfer at L=2 (SD's root acceptance 0.3 and 0.7), PLD at 0.6."""
    root_dir = tmp_path_factory.mktemp("dial")
    for mix, sd_acc, sd_steps, si_steps in ((0.0, 0.3, [[0, 0, 1], [1, 0, 0]], [[1, 1], [2, 0]]),
                                            (0.6, 0.7, [[2, 2], [2, 1]], [[2, 2], [2, 2]])):
        where = root_dir / f"mix{mix}"
        ar(where, "ar", dial_pair(mix))
        roots = [([1.0] * len(s), [sd_acc] * len(s)) for s in sd_steps]
        chain(where, "sd", "sd", 2, sd_steps, roots, pair=dial_pair(mix), wall=0.5)
        chain(where, "specinfer", "specinfer", 2, si_steps, pair=dial_pair(mix), wall=0.5)
    chain(root_dir / "mix0.6", "pld", "pld", 2, [[0, 1], [1, 1]], pair=dial_pair(0.6), draft_calls_per_step=0)
    return root_dir


def test_dial_runs_show_no_token_rate_or_mbsu_numbers(dial_runs, tmp_path):
    tables = load([dial_runs])
    sd = tables.runs[tables.runs["method"] == "sd"]
    assert sd["speed_omitted"].all() and sd[["token_rate", "token_rate_ratio", "mbsu"]].isna().all().all()
    assert tables.prompts.loc[tables.prompts["method"] == "sd", "token_rate"].isna().all()
    md = all_tables(tables.runs, tables.prompts)
    for metric in ("token_rate_ratio", "mbsu"):
        for mix in ("0", "0.6"):
            table = section(md[metric], f"mix a = {mix},")
            for method in ("SD", "SpecInfer"):
                [row] = [line for line in table.splitlines() if line.startswith(f"| {method} |")]
                assert not re.search(r"\d", row), row  # every cell a dash, no number
            assert "acceptance dial's runs (model_pair.mix set): their draft forward also runs the target" in table
            assert re.search(r"\| AR \| 1\.00", table)  # AR never calls the draft: its speed stands
    assert re.search(r"\| PLD \| \d", section(md["mbsu"], "mix a = 0.6,"))  # no draft model: nothing doubled
    assert f"| SD | {11 / 4:.2f} ± " in section(md["block_efficiency"], "mix a = 0.6,")  # BE is reported
    best = best_shapes(tables.runs, tables.prompts)
    pairs = pairs_markdown(best, all_pairs(best, tables.runs, tables.prompts))
    [dial] = [part for part in pairs.split("\n## ") if "mix a = 0.6," in part.split("\n")[0]]
    [row] = [line for line in dial.splitlines() if "| SpecInfer − SD |" in line]
    assert row.rstrip(" |").endswith("| – | –")  # MBSU and token rate differences: dashes
    assert "MBSU and token rate: – for the acceptance dial's runs" in dial
    figs = dict(figures(tables))
    speed = [ax for stem, f in figs.items() if stem.endswith("fixed_length") for ax in f.axes[1:3]]
    assert len(speed) == 4 and all("acceptance dial" in " ".join(t.get_text() for t in ax.texts) for ax in speed)
    for ax in speed:
        for line in ax.lines:
            if line.get_label() in ("SD", "SpecInfer"):
                assert np.isnan(np.asarray(line.get_ydata(), dtype=float)).all()


def test_runs_of_different_mixes_are_never_pooled(dial_runs):
    tables = load([dial_runs])
    best = best_shapes(tables.runs, tables.prompts)
    assert len(best[best["method"] == "sd"]) == 2  # one cell per mix
    cells = best[best["method"] == "sd"].set_index("mix")
    assert sorted(cells.index) == ["0", "0.6"] and all(len(d) == 1 for d in cells["run_dirs"])
    assert cells.loc["0", "block_efficiency"] == pytest.approx(8 / 6)
    assert cells.loc["0.6", "block_efficiency"] == pytest.approx(11 / 4)
    text = all_tables(tables.runs, tables.prompts)["block_efficiency"]
    assert text.count("### ") == 2 and "mix a = 0," in text and "mix a = 0.6," in text
    assert one(tables.runs, method="ar", mix="0.6").token_rate_ratio == 1.0  # each mix has its own AR run


def test_dial_figure_plots_gain_over_sd_against_sd_acceptance(dial_runs):
    figs = dict(figures(load([dial_runs])))
    [stem] = [s for s in figs if s.endswith("_dial")]
    assert "mix" not in stem  # one figure over every mix
    fig = figs[stem]
    [ax] = fig.axes
    title = fig._suptitle.get_text()
    assert "gain over SD" in title and "mean exact root acceptance" in title and "mix a" in title
    assert "root acceptance" in ax.get_xlabel() and "SD's" in ax.get_ylabel()
    [line] = [line for line in ax.lines if line.get_label() == "SpecInfer"]
    assert list(line.get_xdata()) == pytest.approx([0.3, 0.7])
    assert list(line.get_ydata()) == pytest.approx([8 / 4 - 8 / 6, 12 / 4 - 11 / 4])
    assert sorted(t.get_text() for t in ax.texts) == ["a=0", "a=0.6"]


def test_report_writes_the_optimum_table_and_the_dial_figure(dial_runs, optimum_runs, tmp_path):
    report = build_report([dial_runs, optimum_runs], tmp_path / "report", compact=True)
    assert (tmp_path / "report" / "table_optimum.md").read_text().startswith("# Root acceptance against the optimum")
    names = {p.name for p in report.files}
    assert any(n.endswith("_dial.png") for n in names) and any(n.endswith("_optimum.png") for n in names)
    runs = report.tables.runs
    assert runs.loc[runs["speed_omitted"], "token_rate"].isna().all() and len(runs) == 11
    assert json.loads((dial_runs / "mix0.6" / "sd" / "summary.json").read_text())["token_rate"] > 0  # left as is
