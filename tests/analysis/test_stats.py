"""analysis.stats and the study-facing parts of the report: paired tests against scipy, Holm, ranking lines, shape
selection labels, expected block efficiency, decode rates, greedy divergence, robustness, figures that explain
themselves. Synthetic run directories only (see tests/analysis/test_analysis.py for how they are written)."""

import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.collections import LineCollection
from scipy import stats as sps

from analysis.derived import first_divergence
from analysis.expectation import expectation_check
from analysis.figures import COLORS, figures
from analysis.load import load
from analysis.pair_tables import ranking_lines
from analysis.pairs import all_pairs
from analysis.report import build_report, main
from analysis.run_tables import compute_table
from analysis.stats import holm, paired
from analysis.tables import all_tables, best_shapes
from helpers.runs import HOT, one, record, write_run

N = 12  # prompts per run
GREEDY = {**HOT, "temperature": 0.0}
SHAPES = {"sd": {"draft_length": 2}, "bv": {"draft_length": 2}, "spectr": {"num_drafts": 3, "draft_length": 2},
          "rsd_c": {"branching": [3, 1]}, "tv": {"branching": [3, 1]}}


def base(i: int) -> list[int]:
    return [i % 3, (i + 1) % 3, 1, 0]


def plus(i: int, bumps: dict[int, list[int]]) -> list[int]:
    return [a + b for a, b in zip(base(i), bumps.get(i, [0, 0, 0, 0]))]


ACCEPTED = {  # per method: prompt -> accepted lengths of its 4 steps
    "sd": {i: base(i) for i in range(N)},
    "spectr": {i: plus(i, {0: [0, 1, 0, 0], 5: [0, 1, 0, 0], 3: [0, 0, -1, 0]}) for i in range(N)},  # ~ SD
    "rsd_c": {i: plus(i, {i: [1, 0, 1, 0] if i % 4 else [1, 0, 0, 0]}) for i in range(N)},  # clearly better
    "bv": {i: plus(i, {i: [0, 1, 0, 0] if i % 2 else [0, 0, 0, 0]}) for i in range(N)},
    "tv": {i: plus(i, {i: [0, 0, 1, 0] if i % 3 else [1, 0, 1, 0]}) for i in range(N)},
}
OFFSET = {"sd": 0.0, "spectr": 0.01, "rsd_c": -0.02, "bv": 0.0, "tv": 0.0}  # expected_emitted = accepted + 1 + offset


def rec(method: str, i: int, decode: bool = False, ids: list[int] | None = None) -> dict:
    accepted = ACCEPTED[method][i]
    r = record(f"p{i:02d}", accepted, 1.0 + 0.1 * i, 50.0, 2, 2)
    r["expected_emitted"] = [a + 1 + OFFSET[method] for a in accepted]
    if decode:
        r["decode_s"] = 0.5 + 0.05 * i + (0.2 if method == "sd" else 0.0)
        r["decode_token_rate"] = (r["new_tokens"] - 1) / r["decode_s"]
    if ids is not None:
        r["new_token_ids"] = ids
    return r


def method_run(root: Path, method: str, x: int = 2, decode: bool = False, budget: str = "fixed_length",
               shape: dict | None = None, tag: str | None = None, extra: dict | None = None, name: str = "") -> Path:
    shape = shape or SHAPES[method]
    tag = tag or (f"L{x}" if "branching" not in shape else "b" + "-".join(map(str, shape["branching"])))
    return write_run(root, name or f"{method}-{tag}-{x}", method, shape, tag, budget, x,
                     [rec(method, i, decode) for i in range(N)], 50.0, extra=extra)


def ar_run(root: Path, sampling: dict = HOT, ids: dict[int, list[int]] | None = None, decode: bool = False) -> Path:
    recs = []
    for i in range(N):
        r = record(f"p{i:02d}", [0] * (len(ids[i]) if ids else 4), 2.0, 50.0, 0, 0)
        if ids:
            r["new_token_ids"] = ids[i]
        if decode:
            r["decode_s"] = 1.5 + 0.01 * i
            r["decode_token_rate"] = 3 / r["decode_s"]
        recs.append(r)
    return write_run(root, "ar", "ar", {}, "none", None, None, recs, 50.0, sampling)


def per_prompt(method: str, metric: str) -> np.ndarray:
    rows = [rec(method, i, decode=True) for i in range(N)]
    if metric == "expected_block_efficiency":
        return np.array([sum(r["expected_emitted"]) / r["target_calls"] for r in rows])
    if metric == "block_efficiency":
        return np.array([r["new_tokens"] / r["target_calls"] for r in rows])
    return np.array([r["decode_token_rate"] for r in rows])


# --- primitives -------------------------------------------------------------------------------------------------

def test_paired_matches_scipy_paired_t_test():
    rng = np.random.default_rng(0)
    a = rng.normal(2.0, 0.5, 20)
    b = a - rng.normal(0.2, 0.3, 20)
    res = paired(a, b)
    ref = sps.ttest_rel(a, b)
    ci = ref.confidence_interval(0.95)
    assert res.n == 20 and res.mean == pytest.approx(np.mean(a - b))
    assert (res.low, res.high) == pytest.approx((ci.low, ci.high))
    assert res.p == pytest.approx(ref.pvalue)
    with_nan = paired(np.append(a, np.nan), np.append(b, 1.0))  # an incomplete pair is dropped
    assert with_nan.n == 20 and with_nan.p == pytest.approx(ref.pvalue)
    assert paired([1.0, 2.0], [1.0, 2.0]).p == 1.0 and paired([2.0, 3.0], [1.0, 2.0]).p == 0.0  # zero spread
    assert math.isnan(paired([1.0], [0.0]).p) and paired([], []).n == 0


def test_holm_is_step_down_and_monotone():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    nan_kept = holm([np.nan, 0.01, 0.02])
    assert math.isnan(nan_kept[0]) and list(nan_kept[1:]) == pytest.approx([0.02, 0.02])  # NaN not counted in m
    assert list(holm([0.6, 0.7])) == [1.0, 1.0]
    assert len(holm([])) == 0


def test_first_divergence():
    assert math.isnan(first_divergence([1, 2, 3], [1, 2, 3]))
    assert first_divergence([1, 2, 9, 4], [1, 2, 3, 4]) == 2
    assert first_divergence([1, 2], [1, 2, 3]) == 2 and first_divergence([5], [1]) == 0


# --- paired comparisons and ranking -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trio(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("trio")
    ar_run(root, decode=True)
    for method in ("sd", "spectr", "rsd_c"):
        method_run(root, method, decode=True)
    return root


def test_paired_differences_equal_scipy_on_the_runs_prompts(trio):
    tables = load([trio])
    pairs = all_pairs(best_shapes(tables.runs, tables.prompts), tables.runs, tables.prompts)
    assert len(pairs) == 3 and set(pairs["kind"]) == {"best shape"}
    row = one(pairs, first="rsd_c", second="spectr")
    for metric in ("expected_block_efficiency", "block_efficiency", "token_rate"):
        a, b = per_prompt("rsd_c", metric), per_prompt("spectr", metric)
        ref = sps.ttest_rel(a, b)
        assert row[f"{metric}_n"] == N
        assert row[f"{metric}_diff"] == pytest.approx(np.mean(a - b))
        assert (row[f"{metric}_low"], row[f"{metric}_high"]) == pytest.approx(tuple(ref.confidence_interval()))
        assert row[f"{metric}_p"] == pytest.approx(ref.pvalue)
    assert row["rate"] == "decode_token_rate"  # every record carries the decode rate
    family_p = [one(pairs, first=f, second=s)["expected_block_efficiency_p"]
                for f, s in (("rsd_c", "spectr"), ("rsd_c", "sd"), ("spectr", "sd"))]
    adjusted = [one(pairs, first=f, second=s)["expected_block_efficiency_p_holm"]
                for f, s in (("rsd_c", "spectr"), ("rsd_c", "sd"), ("spectr", "sd"))]
    assert adjusted == pytest.approx(list(holm(family_p)))


def test_ranking_line_states_holm_adjusted_significance(trio):
    tables = load([trio])
    best = best_shapes(tables.runs, tables.prompts)
    pairs = all_pairs(best, tables.runs, tables.prompts)
    [lines] = ranking_lines(best, pairs).values()
    e = {m: per_prompt(m, "expected_block_efficiency") for m in ("sd", "spectr", "rsd_c")}
    p = {(f, s): sps.ttest_rel(e[f], e[s]).pvalue for f, s in (("rsd_c", "spectr"), ("rsd_c", "sd"),
                                                                 ("spectr", "sd"))}
    adj = dict(zip(p, holm(list(p.values()))))
    assert adj[("rsd_c", "spectr")] < 0.001 and adj[("spectr", "sd")] > 0.05  # the data's design
    assert lines == [f"L=2: RSD-C > SpecTr (p<0.001) > SD (n.s., p={adj[('spectr', 'sd')]:.3f})  "
                     "[ranked by expected BE]"]


def test_pairs_markdown_and_decode_rate_are_labelled(trio, tmp_path):
    report = build_report([trio], tmp_path / "report")
    text = (tmp_path / "report" / "table_pairs.md").read_text()
    assert "- L=2: RSD-C > SpecTr (p<0.001) > SD (n.s." in text
    assert "| L=2 | RSD-C − SpecTr | RSD-C b3-1 vs SpecTr L2 | 12 |" in text
    assert "decode token rate (tokens after the first / decode seconds, prefill excluded)" in text
    assert "Holm" in text and "n.s." in text
    assert (tmp_path / "report" / "pairs.csv").exists() and len(report.pairs) == 3
    rate = report.markdown["token_rate_ratio"]
    assert rate.split("\n\n", 1)[1].startswith("### Decode token rate (tokens after the first / decode seconds, "
                                                "prefill excluded")
    sd_rate = one(report.tables.runs, method="sd").decode_token_rate_ratio
    assert f"| SD | {sd_rate:.2f} ± " in rate
    expected = report.markdown["expected_block_efficiency"]
    sd_e = per_prompt("sd", "expected_block_efficiency")
    assert f"| SD | {sd_e.mean():.2f} ± {sd_e.std(ddof=1) / math.sqrt(N):.2f} |" in expected


def test_tree_level_verifiers_are_compared_on_the_same_drafts(tmp_path):
    for method in ("sd", "bv", "rsd_c", "tv"):
        method_run(tmp_path, method, x=6, budget="fixed_compute")
    method_run(tmp_path, "rsd_c", x=6, budget="fixed_compute", shape={"branching": [2, 2]}, tag="b2-2")
    tables = load([tmp_path])
    pairs = all_pairs(best_shapes(tables.runs, tables.prompts), tables.runs, tables.prompts)
    same = pairs[pairs["kind"] == "same drafts"]
    assert sorted(zip(same["first"], same["second"], same["chosen"])) == [("bv", "sd", "shape L6"),
                                                                         ("tv", "rsd_c", "shape b3-1")]
    row = one(same, first="tv")
    gain = per_prompt("tv", "expected_block_efficiency") - per_prompt("rsd_c", "expected_block_efficiency")
    assert row["expected_block_efficiency_diff"] == pytest.approx(gain.mean())
    assert row["expected_block_efficiency_p_holm"] == pytest.approx(holm(same["expected_block_efficiency_p"])[
        list(same["first"]).index("tv")])
    best_rc = one(pairs[pairs["kind"] == "best shape"], first="rsd_c", second="tv")
    assert "best of 2 on these prompts" in best_rc["chosen"]


def test_comparisons_pooled_over_datasets_pair_prompts_within_each_dataset(tmp_path):
    for dataset in ("dolly_builtin", "xsum_builtin"):  # the same prompt ids in both: pairing must keep them apart
        write_run(tmp_path, f"ar-{dataset}", "ar", {}, "none", None, None,
                  [record(f"p{i:02d}", [0] * 4, 2.0, 50.0, 0, 0) for i in range(N)], 50.0,
                  extra={"dataset": dataset})
        for method in ("sd", "spectr", "rsd_c") if dataset == "xsum_builtin" else ("sd", "spectr", "rsd_c", "bv"):
            method_run(tmp_path, method, name=f"{method}-{dataset}", extra={"dataset": dataset})
    report = build_report([tmp_path], tmp_path / "report")
    pairs = report.pairs
    pooled = pairs[pairs["dataset"] == "dolly_builtin+xsum_builtin"]
    assert sorted(zip(pooled["first"], pooled["second"])) == [("rsd_c", "sd"), ("rsd_c", "spectr"), ("spectr", "sd")]
    row = one(pooled, first="rsd_c", second="spectr")
    a, b = (np.tile(per_prompt(m, "expected_block_efficiency"), 2) for m in ("rsd_c", "spectr"))
    assert row["expected_block_efficiency_n"] == 2 * N
    assert row["expected_block_efficiency_p"] == pytest.approx(sps.ttest_rel(a, b).pvalue)
    assert one(pairs, dataset="dolly_builtin", first="rsd_c", second="spectr")["expected_block_efficiency_n"] == N
    assert row["expected_block_efficiency_p_holm"] == pytest.approx(
        holm(pooled["expected_block_efficiency_p"])[list(pooled["first"] + pooled["second"]).index("rsd_cspectr")])
    text = report.markdown["pairs"]
    assert "Dolly-style prompts + XSum-style (pooled)" in text
    assert any(line.startswith("  L=2: RSD-C > SpecTr (p<0.001) > SD") for line in report.rankings)


def test_expectation_check_flags_runs_whose_expected_be_is_off(trio, tmp_path):
    """sd records the exact expectation (measured = expected on every prompt); spectr's and rsd_c's expectations are
    shifted by a constant per step (OFFSET), which the check must flag; noise-only differences must pass."""
    tables = load([trio])
    text = expectation_check(tables.runs, tables.prompts)
    assert "- 2 runs whose verification is random: p < 0.05 in 2 (100.0%" in text
    assert "- 1 runs where measured and expected agree on every prompt" in text
    assert "| SpecTr L2 | 12 | -0.040 ± 0.000 | -inf | p<0.001 |" in text
    noisy = tmp_path / "noisy"
    ar_run(noisy)
    gen = np.random.default_rng(0)
    for i in range(40):  # unbiased noise: about 5% of runs reject
        records = [rec("sd", j) for j in range(N)]
        for r in records:
            r["expected_emitted"] = [e + gen.normal(0, 0.3) for e in r["expected_emitted"]]
        write_run(noisy, f"sd-{i}", "sd", SHAPES["sd"], f"L2-{i}", "fixed_length", 2, records, 50.0)
    noisy_tables = load([noisy])
    text = expectation_check(noisy_tables.runs, noisy_tables.prompts)
    rejected = int(text.split("p < 0.05 in ")[1].split(" ")[0])
    assert "- 40 runs whose verification is random" in text and rejected <= 6


def test_compute_table_sums_process_hours_and_names_runs_without_them(tmp_path):
    ar_run(tmp_path)
    method_run(tmp_path, "sd", extra={"elapsed_s": 5400.0})
    method_run(tmp_path, "rsd_c", extra={"elapsed_s": 1800.0})
    tables = load([tmp_path])
    text = compute_table(tables.runs)
    decoding = tables.runs[tables.runs["method"] != "ar"]["wall_s"].sum() / 3600
    assert f"| fixed draft length | 2 | 0 | {decoding:.2f} | 2.00 | 0 |" in text
    assert "| AR | 1 | 0 |" in text and "| – | 1 |" in text  # the AR run records no elapsed time
    assert "| **all** | | 3 | 0 |" in text and "| 2.00 | 1 |" in text


# --- shape selection --------------------------------------------------------------------------------------------

def test_tuning_runs_are_excluded_and_every_chosen_shape_is_labelled(tmp_path):
    ar_run(tmp_path)
    tuning = {"prompts": ["t0", "t1", "t2", "t3"], "selected_by": "expected_block_efficiency"}
    for tag, shape, role in (("b3-1", [3, 1], "tune"), ("b2-2", [2, 2], "tune"), ("b3-1", [3, 1], "eval")):
        method_run(tmp_path, "rsd_c", x=6, budget="fixed_compute", shape={"branching": shape}, tag=tag,
                   name=f"rsd_c-{tag}-{role}", extra={"selection": {**tuning, "role": role, "rank": 1}})
    method_run(tmp_path, "spectr", x=6, budget="fixed_compute", shape={"num_drafts": 3, "draft_length": 2}, tag="K3L2")
    method_run(tmp_path, "spectr", x=6, budget="fixed_compute", shape={"num_drafts": 2, "draft_length": 3}, tag="K2L3",
               name="spectr-k2")
    tables = load([tmp_path])
    best = best_shapes(tables.runs, tables.prompts)
    rc = one(best, method="rsd_c")
    assert (rc.shape_tag, rc.n_shapes, rc.selection_kind) == ("b3-1", 1, "tuned")  # the tuning runs are not shapes
    assert rc.selection == "selected on 4 tuning prompts by expected_block_efficiency"
    assert len(rc.run_dirs) == 1 and rc.run_dirs[0].endswith("eval")
    st = one(best, method="spectr")
    assert (st.n_shapes, st.selection_kind) == (2, "best_of")
    assert "biased upward" in st.selection and "expected block efficiency" in st.selection
    md = all_tables(tables.runs, tables.prompts)["block_efficiency"]
    assert "(b3-1, tuned‡)" in md and "best of 2†)" in md
    assert "‡ selected on 4 tuning prompts by expected_block_efficiency, disjoint from the prompts" in md
    assert "chosen on the same prompts this table reports, which is biased upward (winner's curse)" in md
    report = build_report([tmp_path], tmp_path / "report")
    selection = report.markdown["selection"]
    assert "| B6 | RSD-C | b3-1 | 4 | expected_block_efficiency |" in selection and "| yes |" in selection
    assert "| no |" in selection  # b2-2 was tuned but not evaluated


def test_pairs_compare_the_evaluation_run_never_the_tuning_run_of_the_same_shape(tmp_path):
    ar_run(tmp_path)
    tuning = {"prompts": [f"t{i:02d}" for i in range(N)], "selected_by": "expected_block_efficiency", "rank": 1}
    tune_records = [rec("rsd_c", i) | {"prompt_id": f"t{i:02d}"} for i in range(N)]
    for name in ("a-tune", "z-tune"):  # sorted before and after the evaluation run: the order must not matter
        write_run(tmp_path, f"rsd_c-b3-1-{name}", "rsd_c", {"branching": [3, 1]}, "b3-1", "fixed_compute", 6,
                  tune_records, 50.0, extra={"selection": {**tuning, "role": "tune"}})
    method_run(tmp_path, "rsd_c", x=6, budget="fixed_compute", shape={"branching": [3, 1]}, tag="b3-1",
               name="rsd_c-b3-1-m-eval", extra={"selection": {**tuning, "role": "eval"}})
    method_run(tmp_path, "spectr", x=6, budget="fixed_compute", shape={"num_drafts": 3, "draft_length": 2}, tag="K3L2")
    tables = load([tmp_path])
    pairs = all_pairs(best_shapes(tables.runs, tables.prompts), tables.runs, tables.prompts)
    row = one(pairs, kind="best shape")
    assert {row.first, row.second} == {"rsd_c", "spectr"} and row.block_efficiency_n == N
    sign = 1 if row.first == "rsd_c" else -1
    expected = per_prompt("rsd_c", "block_efficiency") - per_prompt("spectr", "block_efficiency")
    assert row.block_efficiency_diff == pytest.approx(sign * expected.mean())


# --- loading: expected BE, robustness, greedy --------------------------------------------------------------------

def test_expected_block_efficiency_per_prompt_and_run(trio, tmp_path):
    tables = load([trio])
    sd_run = one(tables.runs, method="sd")
    expected = per_prompt("sd", "expected_block_efficiency")
    calls = 4 * N
    assert sd_run.expected_block_efficiency == pytest.approx(expected.sum() * 4 / calls)  # from the records
    assert sd_run.expected_block_efficiency_se == pytest.approx(expected.std(ddof=1) / math.sqrt(N))
    assert list(tables.prompts[tables.prompts.method == "sd"].expected_block_efficiency) == pytest.approx(expected)
    steps = tables.steps[(tables.steps.method == "rsd_c") & (tables.steps.prompt_id == "p01")]
    assert list(steps.expected_emitted) == pytest.approx([a + 1 - 0.02 for a in ACCEPTED["rsd_c"][1]])
    old = load_single(tmp_path, drop=("expected_emitted",))  # an old run: no expectation anywhere
    assert math.isnan(old.runs.expected_block_efficiency[0])
    assert "expected_block_efficiency" not in all_tables(old.runs, old.prompts)


def load_single(root: Path, drop: tuple[str, ...]):
    recs = [{k: v for k, v in rec("sd", i).items() if k not in drop} for i in range(N)]
    write_run(root, "old", "sd", SHAPES["sd"], "L2", "fixed_length", 2, recs, 50.0)
    return load([root])


def test_records_changed_under_their_summary_skip_the_run_naming_the_line(tmp_path, caplog):
    ar_run(tmp_path)
    run_dir = method_run(tmp_path, "sd")
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    twin = json.loads(lines[0])
    twin["wall_s"] = 99.0  # a second decode of p00 appended after the summary was written
    for text, where in (("\n".join([lines[0], "{garbage", *lines[1:]]), ":2: not valid JSON"),
                        ("\n".join([*lines, json.dumps(twin)]), f":{N + 1}: duplicate record of prompt 'p00'")):
        (run_dir / "records.jsonl").write_text(text + "\n")
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            tables = load([tmp_path])
        assert list(tables.runs.method) == ["ar"] and len(tables.skipped) == 1
        assert tables.skipped[0].startswith(f"{run_dir / 'records.jsonl'}{where}")
        assert f"skipping {run_dir / 'records.jsonl'}{where}" in caplog.text


def test_unreadable_runs_are_named_and_the_report_is_built_from_the_rest(tmp_path, caplog, capsys):
    ar_run(tmp_path)
    method_run(tmp_path, "sd")
    garbled = method_run(tmp_path, "spectr")
    (garbled / "summary.json").write_text("{not json")
    partial = method_run(tmp_path, "rsd_c")
    summary = json.loads((partial / "summary.json").read_text())
    del summary["mbsu"]
    (partial / "summary.json").write_text(json.dumps(summary))
    empty = method_run(tmp_path, "bv")
    (empty / "records.jsonl").write_text("")
    with caplog.at_level(logging.WARNING):
        assert main([str(tmp_path), "--out", str(tmp_path / "report")]) == 0
    for bad in (garbled, partial, empty):
        assert f"skipping {bad}/summary.json:1: " in caplog.text
    assert "mbsu is missing" in caplog.text and "records checksum disagrees" in caplog.text
    assert "Skipped 3 run(s)" in capsys.readouterr().out
    runs = load([tmp_path]).runs
    assert sorted(runs.method) == ["ar", "sd"]


def test_greedy_runs_report_where_they_first_leave_ars_output(tmp_path):
    reference = {i: list(range(1, rec("sd", i)["new_tokens"] + 1)) for i in range(N)}
    ar_run(tmp_path, GREEDY, ids=reference)
    changed = {3: 2, 7: 3, 8: 0}  # prompt -> the position its output differs from AR's
    outputs = {i: [t + 50 * (j == changed.get(i)) for j, t in enumerate(reference[i])] for i in range(N)}
    recs = [rec("sd", i, ids=outputs[i]) for i in range(N)]
    write_run(tmp_path, "sd", "sd", SHAPES["sd"], "L2", "fixed_length", 2, recs, 50.0, GREEDY)
    identical = [rec("sd", i, ids=reference[i]) for i in range(N)]
    write_run(tmp_path, "spectr", "spectr", SHAPES["spectr"], "L2", "fixed_length", 2, identical, 50.0, GREEDY)
    method_run(tmp_path / "hot", "rsd_c")  # sampled (T = 1): not checked
    tables = load([tmp_path])
    sd_prompts = tables.prompts[tables.prompts.method == "sd"].set_index("prompt_id")
    assert sd_prompts.loc["p03", "greedy_divergence"] == 2 and sd_prompts.loc["p07", "greedy_divergence"] == 3
    assert sd_prompts.loc["p08", "greedy_divergence"] == 0 and math.isnan(sd_prompts.loc["p00", "greedy_divergence"])
    sd_run = one(tables.runs, method="sd")
    assert (sd_run.greedy_prompts, sd_run.greedy_diverged, sd_run.greedy_first_divergence) == (N, 3, 0)
    assert one(tables.runs, method="spectr").greedy_diverged == 0
    assert one(tables.runs, method="rsd_c").greedy_prompts == 0
    report = build_report([tmp_path], tmp_path / "report")
    greedy = report.markdown["greedy"]
    assert "| SD | L2 | L2 | 0 | 3 / 12 | 0 | 2 |" in greedy and "| SpecTr | L2 | L2 | 0 | 0 / 12 | – | – |" in greedy
    assert "RSD-C" not in greedy and "T = 0 (greedy)" in greedy


# --- figures ----------------------------------------------------------------------------------------------------

def test_figures_dodge_methods_show_95_ci_and_readable_names(trio):
    tables = load([trio])
    figs = dict(figures(tables))
    stem = "pairA_dolly_builtin_T1-k0-p1-n8_fixed_length"
    fig = figs[stem]
    be, _, rate, accuracy = fig.axes
    xs = {line.get_label(): line.get_xdata()[0] for line in be.lines if not line.get_label().startswith("_")
          and line.get_label() != "AR"}
    assert len(set(xs.values())) == 3 and min(xs.values()) < 2 < max(xs.values())  # dodged around L = 2
    assert list(be.get_xticks()) == [2]
    labels = fig.legends[0].get_texts()
    assert "AR 95% CI" in [t.get_text() for t in labels]
    assert "Dolly-style prompts" in fig._suptitle.get_text() and "T = 1" in fig._suptitle.get_text()
    assert "95% CI" in fig._suptitle.get_text()
    assert accuracy.get_title() == "Accuracy (ROUGE-L)" and "ROUGE-L" in accuracy.get_ylabel()
    assert rate.get_title() == "Decode token rate" and "prefill excluded" in rate.get_ylabel()
    [bars] = [c for c in be.collections if isinstance(c, LineCollection)
              and np.allclose(c.get_segments()[0][0][0], xs["RSD-C"])]
    values = per_prompt("rsd_c", "block_efficiency")
    half = sps.t.ppf(0.975, N - 1) * values.std(ddof=1) / math.sqrt(N)
    (_, low), (_, high) = bars.get_segments()[0]
    assert high - low == pytest.approx(2 * half)  # 95% t interval, not 1 SE


def test_acceptance_figure_has_confidence_intervals(trio):
    tables = load([trio])
    fig = dict(figures(tables))["pairA_dolly_builtin_T1-k0-p1-n8_fixed_length_acceptance"]
    [ax] = fig.axes
    [sd_line] = [line for line in ax.lines if line.get_label() == "SD"]
    accepted = [ACCEPTED["sd"][i] for i in range(N)]
    hits = np.array([sum(a >= 1 for a in steps) for steps in accepted], dtype=float)
    rate = hits.sum() / (4 * N)
    se = math.sqrt(((hits - rate * 4) ** 2).sum() / (N * (N - 1))) / 4
    assert sd_line.get_ydata()[0] == pytest.approx(rate)
    bars = [c for c in ax.collections if isinstance(c, LineCollection)
            and np.isclose(c.get_segments()[0][0][0], sd_line.get_xdata()[0])]
    (_, low), (_, high) = bars[0].get_segments()[0]
    assert high - low == pytest.approx(2 * sps.t.ppf(0.975, N - 1) * se)


def test_new_verifiers_have_their_own_colours():
    assert len({COLORS[m] for m in ("sd", "bv", "rsd_c", "tv")}) == 4



def test_ranking_line_uses_holm_p_and_falls_back_to_measured_be():
    import pandas as pd

    from analysis.pair_tables import ranking_line

    best = pd.DataFrame({"method": ["sd", "rsd_s", "rsd_c"], "budget": ["fixed_length"] * 3,
                         "expected_block_efficiency": [1.5, 2.0, 1.9], "block_efficiency": [1.6, 1.7, 2.1]})
    pairs = pd.DataFrame({"first": ["rsd_s", "rsd_c", "rsd_s"], "second": ["rsd_c", "sd", "sd"],
                          "expected_block_efficiency_p": [0.02, 0.03, 0.001],
                          "expected_block_efficiency_p_holm": [0.04, 0.06, 0.003],
                          "block_efficiency_p": [0.5, 0.5, 0.5], "block_efficiency_p_holm": [0.5, 0.01, 0.5]})
    assert ranking_line(best, pairs) == "RSD-S > RSD-C (p=0.040) > SD (n.s., p=0.060)  [ranked by expected BE]"
    best.loc[0, "expected_block_efficiency"] = float("nan")  # one method without the expectation: measured BE
    pairs = pairs.assign(first=["rsd_c", "rsd_s", "rsd_c"], second=["rsd_s", "sd", "sd"])
    assert ranking_line(best, pairs) == "RSD-C > RSD-S (n.s., p=0.500) > SD (p=0.010)  [ranked by measured BE]"
    best["block_efficiency"] = 1.7  # a tie (greedy methods often emit the same tokens)
    assert ranking_line(best, pairs).startswith("SD = RSD-S (p=0.010) = RSD-C (n.s., p=0.500)")
