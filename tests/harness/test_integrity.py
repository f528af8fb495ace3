"""Results that cannot be fooled: records checked against their schema and the engine's invariants on every read,
summaries checked against their records, runs over different prompt sets never pooled, and the statistics, metrics,
budgets and fingerprints that a planted bug would otherwise change unnoticed. Synthetic run directories (see
tests/analysis/test_analysis.py); one tiny-pair run checks the runner's records."""

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from analysis.columns import SETTING
from analysis.expectation import expectation_check
from analysis.load import load
from analysis.pair_tables import fmt_p, ranking_line
from analysis.pairs import adjust
from analysis.report import main
from analysis.stats import compare
from analysis.tables import all_tables, best_shapes
from helpers.config import run_cfg
from helpers.runs import DRAFT, TARGET, one, record, write_run
from rsd.core.budgets import Budget, TooManyRunsError, factor_pairs, select_shapes
from rsd.core.metrics import mbsu, summarize_records
from rsd.drafters.recursive import RSDC
from rsd.harness.files import run_file_sha256
from rsd.harness.identity import model_fingerprint
from rsd.harness.runner import format_table, run
from rsd.harness.schema import ModelPairConfig
from rsd.harness.store import complete_summary, record_problem, scan_records

R = DRAFT / TARGET


def sd_run(root: Path, name: str, accepted: list[list[int]], x: int = 2, extra: dict | None = None,
           shape: dict | None = None, tag: str | None = None, budget: str = "fixed_length") -> Path:
    recs = [record(f"p{i}", a, 1.0, 50.0, x, x) for i, a in enumerate(accepted)]
    return write_run(root, name, shape and "rsd_c" or "sd", shape or {"draft_length": x}, tag or f"L{x}", budget, x,
                     recs, 50.0, extra=extra)


def ar_run(root: Path, name: str, prompts: int) -> Path:
    return write_run(root, name, "ar", {}, "none", None, None,
                     [record(f"p{i}", [0] * 4, 2.0, 50.0, 0, 0) for i in range(prompts)], 50.0)


def edit_summary(run_dir: Path, **changes) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, **changes}))


# --- item 1: runs over different prompt sets are never pooled ---------------------------------------------------

def test_two_prompt_sets_of_one_dataset_get_separate_labelled_cells(tmp_path):
    ar_run(tmp_path / "quick", "ar", 3)
    sd_run(tmp_path / "quick", "sd", [[2, 2]] * 3)  # BE 3 on 3 prompts
    ar_run(tmp_path / "study", "ar", 5)
    sd_run(tmp_path / "study", "sd", [[0, 0]] * 5)  # BE 1 on 5 prompts, same dataset, T, L
    tables = load([tmp_path])
    best = best_shapes(tables.runs, tables.prompts)
    cells = best[best["method"] == "sd"].set_index("prompt_set")
    assert len(cells) == 2 and sorted(len(d) for d in cells["run_dirs"]) == [1, 1]
    assert sorted(cells["block_efficiency"]) == [1.0, 3.0]
    assert sorted(cells.index.str.split().str[0]) == ["3", "5"]
    text = all_tables(tables.runs, tables.prompts)["block_efficiency"]
    assert text.startswith("Runs are grouped by model pair, draft model, dtype, dataset, prompt set")
    assert sum(f"{label}," in text for label in cells.index) == 2  # each table's heading names its prompt set
    assert one(tables.runs, method="sd", prompt_set=cells.index[0]).token_rate_ratio > 0  # its own set's AR run
    assert "prompt_set" in SETTING



def test_one_pair_name_run_with_two_drafts_gets_separate_labelled_cells(tmp_path):
    """The default pair's draft changed (v2 -> v3) under the same name: a results directory holding both must not
    average them (it did: one SD cell over both drafts' runs)."""
    for draft, accepted in (("embedded:smollm2-draft-v2", [0, 0]), ("embedded:smollm2-draft-v3", [2, 2])):
        pair = {"name": "smollm2", "target": "embedded:smollm2-135m-instruct", "draft": draft}
        tag = draft[-2:]
        write_run(tmp_path, f"ar-{tag}", "ar", {}, "none", None, None,
                  [record(f"p{i}", [0] * 4, 2.0, 50.0, 0, 0) for i in range(3)], 50.0, pair=pair)
        write_run(tmp_path, f"sd-{tag}", "sd", {"draft_length": 2}, "L2", "fixed_length", 2,
                  [record(f"p{i}", accepted, 1.0, 50.0, 2, 2) for i in range(3)], 50.0, pair=pair)
    tables = load([tmp_path])
    best = best_shapes(tables.runs, tables.prompts)
    cells = best[best["method"] == "sd"].set_index("draft")
    assert sorted(cells["block_efficiency"]) == [1.0, 3.0]
    text = all_tables(tables.runs, tables.prompts)["block_efficiency"]
    assert "draft smollm2-draft-v2," in text and "draft smollm2-draft-v3," in text
    assert "draft" in SETTING


# --- item 2: records and summaries are checked on read ----------------------------------------------------------

GOOD = record("p0", [2, 0, 1], 1.0, 50.0, 2, 2)


@pytest.mark.parametrize("change, words", [
    ({"target_calls": 0}, "target_calls must be an integer >= 1"),
    ({"draft_calls": None}, "missing draft_calls"),
    ({"new_tokens": "eight"}, "new_tokens must be"),
    ({"prompt_id": [1]}, "prompt_id must be a string"),
    ({"new_tokens": 7}, "new_tokens=7 but new_token_ids holds 6"),
    ({"accepted_lengths": [2, 0]}, "accepted_lengths has 2 entries for target_calls=3"),
    ({"new_tokens": 7, "new_token_ids": [1] * 7}, "emit between 5 and 6 tokens"),
    ({"new_tokens": 4, "new_token_ids": [1] * 4}, "emit between 5 and 6 tokens"),
    ({"accepted_lengths": [5, 0, 0]}, "exceeds the tokens verified"),
    ({"decode_tokens": 6, "decode_s": 1.0}, "decode_tokens=6 but the steps after the first emit 3"),
    ({"decode_tokens": 3, "decode_s": 0.5, "decode_token_rate": 12.0}, "decode_token_rate=12.0 is not"),
])
def test_records_breaking_the_schema_or_the_engine_invariants_are_corrupt(change, words):
    assert record_problem(GOOD) is None
    assert record_problem({**GOOD, "decode_tokens": 3, "decode_s": 0.5, "decode_token_rate": 6.0}) is None
    bad = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    assert words in record_problem(bad)


def test_scan_names_a_corrupt_line_and_keeps_the_first_record_of_a_prompt(tmp_path):
    path = tmp_path / "records.jsonl"
    lines = [GOOD, {**GOOD, "target_calls": 0}, {**GOOD, "wall_s": 9.0}, {**GOOD, "prompt_id": "p1"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    records, problems = scan_records(path)
    assert [(r["prompt_id"], r["wall_s"]) for r in records] == [("p0", 1.0), ("p1", 1.0)]
    assert problems[0].startswith(f"{path}:2: corrupt record (target_calls") and problems[1].startswith(f"{path}:3")


def test_complete_summary_rechecks_the_summary_against_its_records(tmp_path):
    run_dir = sd_run(tmp_path, "sd", [[2, 2], [1, 0]])
    ids = ["p0", "p1"]
    assert complete_summary(run_dir, ids) is not None
    assert complete_summary(run_dir, ["p0", "p2"], quiet=True) is None  # another run's prompts
    assert complete_summary(run_dir, ["p1", "p0"], quiet=True) is None
    good = (run_dir / "summary.json").read_text()
    for change in ({"block_efficiency": 9.99}, {"complete": False}, {"mbsu": "fast"}, {"prompt_ids": ["p0"]},
                   {"acceptance_by_depth": [1.0, 1.0]}):
        edit_summary(run_dir, **change)
        assert complete_summary(run_dir, ids, quiet=True) is None, change
        (run_dir / "summary.json").write_text(good)
    summary = json.loads(good)
    del summary["draft_calls"]
    (run_dir / "summary.json").write_text(json.dumps(summary))
    assert complete_summary(run_dir, ids, quiet=True) is None


def test_the_report_reads_only_complete_runs_whose_summary_agrees_with_its_records(tmp_path, capsys):
    ar_run(tmp_path, "ar", 2)
    sd_run(tmp_path, "sd", [[2, 2], [1, 0]])
    edited = sd_run(tmp_path, "sd3", [[2, 2], [1, 0]], x=3)
    edit_summary(edited, block_efficiency=9.99)
    unfinished = sd_run(tmp_path, "sd4", [[2, 2], [1, 0]], x=4)
    edit_summary(unfinished, complete=False, block_efficiency=7.5)
    string_be = sd_run(tmp_path, "sd5", [[2, 2], [1, 0]], x=5)
    edit_summary(string_be, block_efficiency="fast")
    assert main([str(tmp_path), "--out", str(tmp_path / "report")]) == 0
    out = capsys.readouterr().out
    assert sorted(load([tmp_path]).runs["x"].dropna()) == [2]
    tables_text, skipped = out.split("Skipped 3 run(s)")
    assert "9.99" not in tables_text and "7.50" not in tables_text
    assert "9.99" not in (tmp_path / "report" / "table_block_efficiency.md").read_text()
    assert f"{edited}/summary.json:1: block_efficiency=9.99 disagrees with its records" in skipped
    assert f"{unfinished}/summary.json:1: not a complete run summary" in skipped
    assert f"{string_be}/summary.json:1: block_efficiency='fast'" in skipped


# --- items 8, 10, 12: the report's paths, inputs, output and metric names ----------------------------------------

def test_runs_csv_holds_paths_relative_to_the_results_directory(tmp_path):
    root = tmp_path / "results"
    ar_run(root / "a", "ar", 2)
    assert main([str(root), "--out", str(tmp_path / "report"), "--compact"]) == 0
    written = pd.read_csv(tmp_path / "report" / "runs.csv")
    assert list(written["run_dir"]) == [os.path.join("a", "ar")]


def test_runs_reached_through_a_symlink_are_found(tmp_path):
    ar_run(tmp_path / "elsewhere", "ar", 2)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "linked").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere" / "loop").symlink_to(tmp_path / "results")  # a cycle is walked once
    runs = load([tmp_path / "results"]).runs
    assert list(runs["run_dir"]) == [str(tmp_path / "results" / "linked" / "ar")]


def test_report_out_naming_a_file_is_one_line_and_writes_nothing(tmp_path, capsys):
    ar_run(tmp_path / "results", "ar", 2)
    target = tmp_path / "report.md"
    target.write_text("mine")
    assert main([str(tmp_path / "results"), "--out", str(target)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a file, not a directory" in err and target.read_text() == "mine"


def test_the_run_tables_name_the_accuracy_metric(tmp_path):
    ar_run(tmp_path, "ar", 2)
    runs = load([tmp_path]).runs
    assert list(runs["accuracy_metric"]) == ["ROUGE-L"]
    summary = {"method": "sd", "shape_tag": "L2", "budget_value": "L2", "block_efficiency": 2.0, "mbsu": 1.5,
               "token_rate": 3.0, "accuracy": 41.0}
    assert format_table([{**summary, "task": "translation"}]).splitlines()[0].split()[-1] == "BLEU"
    mixed = format_table([{**summary, "task": "translation"}, {**summary, "task": "instruction"}]).splitlines()
    assert mixed[0].split()[-1] == "score" and mixed[2].endswith("41.0 BLEU") and mixed[3].endswith("41.0 ROUGE-L")


# --- item 13: statistics and metrics that a planted bug would change --------------------------------------------

def prompt_frame(rows: list[tuple[str, str, str, float]]) -> pd.DataFrame:
    """Prompt rows (run_dir, dataset, prompt_id, value) with every compared metric equal to `value`."""
    frame = pd.DataFrame(rows, columns=["run_dir", "dataset", "prompt_id", "value"])
    for metric in ("expected_block_efficiency", "block_efficiency", "mbsu", "token_rate"):
        frame[metric] = frame["value"]
    return frame.assign(decode_token_rate=math.nan)


def test_paired_test_aligns_the_prompts_of_both_runs():
    a = {f"p{i}": v for i, v in enumerate([1.0, 2.5, 1.7, 3.1, 2.2, 1.4])}
    b = {f"p{i}": v for i, v in enumerate([0.8, 2.0, 1.9, 2.4, 1.2, 1.5, 9.0])}  # an extra prompt
    rows = [("A", "d", p, v) for p, v in a.items()] + [("B", "d", p, b[p]) for p in reversed(list(b))]
    res = compare(prompt_frame(rows), "A", "B")
    want = sps.ttest_rel(list(a.values()), [b[p] for p in a])
    assert res["block_efficiency_n"] == len(a) and res["block_efficiency_p"] == pytest.approx(want.pvalue)


def test_pooled_comparison_pairs_a_prompt_within_its_dataset():
    values = {("d", "A"): [1.0, 2.0, 3.0, 4.5], ("x", "A"): [7.0, 5.5, 9.0, 6.0],
              ("d", "B"): [0.5, 1.8, 2.1, 4.0], ("x", "B"): [6.1, 5.4, 8.0, 4.9]}
    order = [("d", "A"), ("x", "A"), ("x", "B"), ("d", "B")]  # B's runs stored in the other order
    rows = [(f"{m}-{d}", d, f"p{i}", v) for d, m in order for i, v in enumerate(values[(d, m)])]
    res = compare(prompt_frame(rows), ["A-d", "A-x"], ["B-d", "B-x"])
    want = sps.ttest_rel(values[("d", "A")] + values[("x", "A")], values[("d", "B")] + values[("x", "B")])
    assert res["block_efficiency_n"] == 8 and res["block_efficiency_p"] == pytest.approx(want.pvalue)


def test_holm_families_are_split_by_seed():
    p = {0: [0.01, 0.04], 1: [0.02, 0.03]}
    setting = {k: "s" for k in SETTING}
    pairs = pd.DataFrame([{**setting, "seed": seed, "budget": "fixed_length", "kind": "best shape",
                           **{f"{m}_p": v for m in ("expected_block_efficiency", "block_efficiency", "mbsu",
                                                    "token_rate")}}
                          for seed, ps in p.items() for v in ps])
    adjusted = adjust(pairs)
    for seed, ps in p.items():
        m = len(ps)
        want = np.maximum.accumulate([min(1.0, (m - i) * v) for i, v in enumerate(sorted(ps))])
        got = adjusted[adjusted["seed"] == seed]["block_efficiency_p_holm"]
        assert list(got) == pytest.approx(list(want))


def test_ranking_gap_is_significant_only_if_every_seed_is():
    best = pd.DataFrame({"method": ["rsd_s", "sd"], "budget": ["fixed_length"] * 2,
                         "expected_block_efficiency": [2.0, 1.5], "block_efficiency": [2.0, 1.5]})
    pairs = pd.DataFrame({"first": ["rsd_s", "rsd_s"], "second": ["sd", "sd"],
                          "expected_block_efficiency_p_holm": [0.01, 0.3]})  # seeds 0 and 1
    assert ranking_line(best, pairs) == "RSD-S > SD (n.s., p=0.300)  [ranked by expected BE]"


def test_expectation_check_uses_t_distributions():
    d = np.array([0.5, 1.5, 1.0])  # measured minus expected tokens per prompt: z = 3.46 on 2 degrees of freedom
    setting = {k: "s" for k in SETTING}
    runs = pd.DataFrame([{**setting, "budget": "fixed_length", "expected_block_efficiency": 1.0, "method": "sd",
                          "shape_tag": "L2", "seed": 0, "run_dir": "A", "budget_value": "L2", "selection_role": ""}])
    prompts = pd.DataFrame({"run_dir": "A", "prompt_id": ["p0", "p1", "p2"], "target_calls": 4,
                            "expected_block_efficiency": 1.0, "block_efficiency": 1.0 + d / 4})
    text = expectation_check(runs, prompts)
    z = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    p = 2 * sps.t.sf(z, len(d) - 1)
    assert p > 0.05 > 2 * sps.norm.sf(z)  # a normal law would flag the run
    assert "p < 0.05 in 0" in text and "Runs with p < 0.05" not in text
    assert f"two-sided t-test p = {p:.2f})" in text and fmt_p(p) == "p=0.074"


def test_mbsu_counts_draft_calls_per_target_call_not_the_tree_depth(tmp_path):
    recs = [record("p0", [2, 1, 0], 1.0, 50.0, 3, 2), record("p1", [0, 2], 1.0, 50.0, 3, 2)]  # 3 calls, depth 2
    be = sum(r["new_tokens"] for r in recs) / sum(r["target_calls"] for r in recs)
    assert summarize_records(recs, DRAFT, TARGET)["mbsu"] == pytest.approx(be / (1 + 3 * R))
    write_run(tmp_path, "sd", "sd", {"draft_length": 2}, "L2", "fixed_length", 2, recs, 50.0)
    tables = load([tmp_path])
    assert one(tables.runs, method="sd").mbsu == pytest.approx(be / (1 + 3 * R))
    assert one(tables.prompts, prompt_id="p0").mbsu == pytest.approx(mbsu(6 / 3, 3, DRAFT, TARGET))


def test_decode_token_rate_counts_the_tokens_after_the_first_step():
    recs = [{**record("p0", [2, 1, 0], 1.0, 50.0, 2, 2), "decode_tokens": 3, "decode_s": 0.5},
            {**record("p1", [1, 2], 1.0, 50.0, 2, 2), "decode_tokens": 3, "decode_s": 0.25}]
    assert all(record_problem(r) is None for r in recs)
    assert summarize_records(recs, DRAFT, TARGET)["decode_token_rate"] == pytest.approx(6 / 0.75)


def test_the_runners_records_pass_the_invariants(tmp_path):
    [summary] = run(run_cfg("model_pair=tiny_llama", "dataset=xsum_builtin", "dataset.num_prompts=3",
                            "sampling.max_new_tokens=8", "drafter=sd", f"out_dir={tmp_path}"))
    records, problems = scan_records(Path(summary["run_dir"]) / "records.jsonl")
    assert problems == [] and len(records) == 3
    assert any(r["target_calls"] > 1 and r["decode_token_rate"] is not None for r in records)


def test_the_tuned_cell_is_the_shape_ranked_first_on_the_tuning_prompts(tmp_path):
    select = {"role": "eval", "prompts": ["t0", "t1"], "selected_by": "expected block efficiency"}
    for rank, (branching, accepted) in enumerate((([3, 1], [[0, 0]] * 2), ([2, 2], [[2, 2]] * 2)), start=1):
        sd_run(tmp_path, f"b{rank}", accepted, x=6, budget="fixed_compute", shape={"branching": branching},
               tag="b" + "-".join(map(str, branching)), extra={"selection": {**select, "rank": rank}})
    tables = load([tmp_path])
    cell = one(best_shapes(tables.runs, tables.prompts), method="rsd_c")
    assert (cell["shape_tag"], cell["selection_kind"]) == ("b3-1", "tuned")  # rank 1, though b2-2 scores higher here


def test_max_runs_allows_exactly_max_runs_runs():
    budget = Budget("fixed_compute", target_tokens=6)
    shapes = RSDC.shapes(budget, {})
    exact = Budget("fixed_compute", target_tokens=6, max_runs=len(shapes))
    assert select_shapes("rsd_c", shapes, exact, None) == shapes
    with pytest.raises(TooManyRunsError, match=f"raise budget.max_runs={len(shapes)}"):
        select_shapes("rsd_c", shapes, Budget("fixed_compute", target_tokens=6, max_runs=len(shapes) - 1), None)


@pytest.mark.parametrize("n", [1, 6, 12, 13, 30, 36])
def test_factor_pairs_lists_every_divisor_pair(n):
    exponents, rest, p = [], n, 2  # the divisor count from the prime factorisation: prod(e + 1)
    while rest > 1:
        e = 0
        while rest % p == 0:
            rest, e = rest // p, e + 1
        exponents.append(e)
        p += 1
    pairs = factor_pairs(n)
    assert len(set(pairs)) == len(pairs) == math.prod(e + 1 for e in exponents)
    assert all(a * b == n for a, b in pairs) and {(1, n), (n, 1)} <= set(pairs)


def test_model_fingerprint_follows_the_tokenizer(tmp_path):
    fingerprints = []
    for name in ("a", "b"):
        tok = tmp_path / name
        tok.mkdir()
        (tok / "tokenizer.json").write_text(json.dumps({"model": name}))
        fingerprints.append(model_fingerprint(ModelPairConfig("p", "tiny:llama", "tiny:llama", tokenizer=str(tok))))
    assert fingerprints[0] != fingerprints[1]


def test_complete_summary_checks_the_checksum(tmp_path):
    run_dir = sd_run(tmp_path, "sd", [[1, 0]])
    with (run_dir / "records.jsonl").open("a") as f:
        f.write("\n")
    assert run_file_sha256(run_dir / "records.jsonl") != json.loads((run_dir / "summary.json").read_text())[
        "records_sha256"]
    assert complete_summary(run_dir, ["p0"], quiet=True) is None
