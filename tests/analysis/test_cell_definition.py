"""One definition of a cell's block efficiency (issue 34): the mean over prompts of per-prompt ratios, recomputed here
from the raw records.jsonl, equals what every table, figure, pair and ranking of the report shows."""

import json
import re
import statistics
from pathlib import Path

import pytest

from analysis.figures import figures
from analysis.load import load
from analysis.report import build_report
from analysis.run_tables import selection_changes, selection_table
from helpers.runs import one, record, write_run

# SD L=2 on three prompts of very different lengths: the ratio of sums (run-level) differs from the prompt mean.
SD_STEPS = ([1, 1, 1, 1, 1, 1, 1, 1, 1, 1], [0, 0], [1, 0, 0, 0])
SPECTR_STEPS = ([2, 1, 1, 1, 0, 1, 1, 1, 1, 1], [1, 0], [1, 1, 0, 0])


def with_expectations(records: list[dict], offset: float) -> list[dict]:
    for r in records:
        r["expected_emitted"] = [a + 1 + offset for a in r["accepted_lengths"]]
    return records


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cells")
    ar = [record(f"p{i}", [0] * 8, 2.0, 50.0, 0, 0) for i in range(3)]
    write_run(root, "ar", "ar", {}, "none", None, None, ar, 50.0)
    for method, steps, offset in (("sd", SD_STEPS, 0.05), ("spectr", SPECTR_STEPS, -0.1)):
        recs = with_expectations([record(f"p{i}", a, 1.0, 50.0, 2, 2) for i, a in enumerate(steps)], offset)
        write_run(root, method, method, {"draft_length": 2}, "L2", "fixed_length", 2, recs, 50.0)
    return root


def per_prompt(run_dir: Path, expected: bool) -> list[float]:
    """The documented definition, from the raw records: each prompt's (expected) tokens / its target calls."""
    rows = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    return [(sum(r["expected_emitted"]) if expected else r["new_tokens"]) / r["target_calls"] for r in rows]


def test_table_cells_figures_and_pairs_use_the_prompt_mean(runs, tmp_path):
    report = build_report([runs], tmp_path / "report", compact=True)
    for metric, expected in (("block_efficiency", False), ("expected_block_efficiency", True)):
        for method, label in (("sd", "SD"), ("spectr", "SpecTr")):
            values = per_prompt(runs / method, expected)
            mean, se = statistics.mean(values), statistics.stdev(values) / len(values) ** 0.5
            rows = [json.loads(line) for line in (runs / method / "records.jsonl").read_text().splitlines()]
            ratio_of_sums = (sum(sum(r["expected_emitted"]) if expected else r["new_tokens"] for r in rows)
                             / sum(r["target_calls"] for r in rows))
            assert f"{mean:.2f}" != f"{ratio_of_sums:.2f}"  # the two definitions differ on these records
            assert f"| {label} | {mean:.2f} ± {se:.2f} |" in report.markdown[metric]
        assert "mean over prompts of the per-prompt value" in report.markdown[metric]
    sd_values, spectr_values = (per_prompt(runs / m, True) for m in ("sd", "spectr"))
    pair = one(report.pairs, first="sd", second="spectr") if (report.pairs["first"] == "sd").any() else \
        one(report.pairs, first="spectr", second="sd")
    sign = 1 if pair["first"] == "sd" else -1
    assert pair["expected_block_efficiency_diff"] == pytest.approx(
        sign * (statistics.mean(sd_values) - statistics.mean(spectr_values)))
    [line] = [x for x in report.rankings if "L=2:" in x]
    first = "SD" if statistics.mean(sd_values) > statistics.mean(spectr_values) else "SpecTr"
    assert re.search(rf"L=2: {first} >", line)
    fig = dict(figures(load([runs])))["pairA_dolly_builtin_T1-k0-p1-n8_fixed_length"]
    [sd_line] = [x for x in fig.axes[0].lines if x.get_label() == "SD"]
    assert list(sd_line.get_ydata()) == pytest.approx([statistics.mean(per_prompt(runs / "sd", False))])


def test_the_selection_table_counts_cells_the_other_definition_would_change(tmp_path):
    tune = {"selection": {"role": "tune", "prompts": ["p0", "p1", "p2"]}}
    # shape a: 20/15 = 1.33 run-level, prompt mean 1.42; shape b: 17/11 = 1.55 and 1.40: the rankings disagree
    steps = {"a": ([1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0], [1, 1], [0]), "b": ([1, 0, 1, 0, 1], [1, 0, 1, 0, 1], [0])}
    for tag, shape_steps in steps.items():
        recs = with_expectations([record(f"p{i}", a, 1.0, 50.0, 2, 2) for i, a in enumerate(shape_steps)], 0.0)
        write_run(tmp_path, f"rsd_c-{tag}", "rsd_c", {"branching": [2, 1]}, tag, "fixed_compute", 6, recs, 50.0,
                  extra=tune)
    tables = load([tmp_path])
    assert list(tables.runs["expected_block_efficiency_prompt_mean"]) == pytest.approx(
        [statistics.mean(per_prompt(Path(d), True)) for d in tables.runs["run_dir"]])
    assert selection_changes(tables.runs) == (1, 1)
    text = selection_table(tables.runs)
    assert text.startswith("Ranked by the other definition") and "1 of 1 cells" in text
