"""The third edition's page (docs/results/embedded-eagle): the report, its answers and per-position acceptance as
CSV, and a README.md whose every comparison sentence and table is generated from those CSVs.

    python -m analysis.edition RESULTS_DIR --out docs/results/embedded-eagle

`page(out)` rebuilds README.md from the CSVs alone, so a test can check that the committed page says what the
committed tables say (tests/analysis/test_edition.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from analysis.acceptance import acceptance_frame, acceptance_markdown
from analysis.answers import CLAIMS, answer_cell, answers_markdown, answers_sentence, ordering_answers
from analysis.control import control_markdown, control_rows
from analysis.names import method_label
from analysis.rates import costs_markdown, costs_sentence, rate_ratios, same_work_sentence, step_costs
from analysis.rates import markdown as rates_markdown
from analysis.rates import sentence as rates_sentence
from analysis.report import build_report
from analysis.shared import (
    load_shared,
    means_markdown,
    means_sentence,
    shared_answers,
    shared_markdown,
    shared_means,
    widths_sentence,
    with_own_widths,
)
from analysis.tables import best_shapes
from analysis.trend import trend_markdown, trend_rows

EAGLE = "eagle2"
PAPER_METHODS = ("sd", "specinfer", "spectr", "rsd_c", "rsd_s")
EAGLE_WORDS = {"reproduced": "EAGLE-2 ahead", "reversed": "EAGLE-2 behind", "equal within ±0.05": "equal within ±0.05",
               "undecided": "undecided"}
SETS = ("dolly_builtin", "xsum_builtin", "wmt_builtin")
GRID = tuple([(d, 1.0, "fixed_length") for d in SETS] + [(d, 1.0, "fixed_compute") for d in SETS]
             + [(d, 0.6, "fixed_length") for d in SETS[:2]])  # experiments/study.sh's stages (RSD_STUDY=eagle)


def eagle_rows(pairs: pd.DataFrame) -> pd.DataFrame:
    """EAGLE-2's tree against each paper method, as `ordering_answers` rows with EAGLE-2 as the higher side."""
    return ordering_answers(pairs, [(EAGLE, m) for m in PAPER_METHODS]) if len(pairs) else pd.DataFrame()


def eagle_markdown(rows: pd.DataFrame) -> str:
    if rows.empty:
        return "No point ran EAGLE-2's tree next to a paper method yet.\n"
    out = []
    for (dataset, temperature, budget), group in rows.groupby(["dataset", "temperature", "budget"], sort=True):
        methods = [m for m in PAPER_METHODS if (group["lower"] == m).any()]
        head = ["point"] + [f"EAGLE-2 − {method_label(m)}" for m in methods]
        lines = [f"**{dataset}, T = {temperature}, {budget}** ({group['metric'].iloc[0]}, 95% CI, Holm p)", "",
                 "| " + " | ".join(head) + " |", "|---|" + "---|" * len(methods)]
        for x, at in group.groupby("x", sort=True):
            cells = [answer_cell(at[at["lower"] == m].iloc[0], EAGLE_WORDS) if (at["lower"] == m).any() else "–"
                     for m in methods]
            lines.append(f"| {'L' if budget == 'fixed_length' else 'B'} = {x} | " + " | ".join(cells) + " |")
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def included(path: Path, absent: str) -> str:
    """A generated markdown table of this folder, its own title dropped (the page gives the section), or `absent`."""
    if not path.is_file():
        return absent + "\n"
    lines = path.read_text().splitlines()
    return "\n".join(lines[1:] if lines and lines[0].startswith("# ") else lines).strip() + "\n"


def first_paragraph(path: Path, absent: str) -> str:
    """The generated summary sentence that opens a markdown table file of this folder, or `absent`."""
    return (path.read_text().split("\n\n")[0].strip() if path.is_file() else absent) + "\n"


def read_csv(out: Path, name: str) -> pd.DataFrame:
    path = out / name
    try:
        return pd.read_csv(path, keep_default_na=False, na_values=[""])
    except (FileNotFoundError, pd.errors.EmptyDataError):  # not written, or written with no rows yet
        return pd.DataFrame()


def token_rates(out: Path) -> str:
    """The token-rate section from rates.csv (the quiet pass's ratios to AR), or why it is absent."""
    rates, costs = read_csv(out, "rates.csv"), read_csv(out, "costs.csv")
    if rates.empty or costs.empty:
        return ("The quiet single-process token-rate pass (the study's rates stage, at T = 1 and T = 0) has not run "
                "yet; the fixed-length runs above shared the machine with a second worker, so their timings are not "
                "compared.\n")
    per_set = " (per-set tables with SEs: rates/table_token_rate_ratio.md)" \
        if (out / "rates" / "table_token_rate_ratio.md").is_file() else ""
    intro = ("The study's rates stage: the fixed-length grid again on the first prompts of each set, in one "
             "process with one torch thread on an otherwise idle machine, float32. The decode token rate counts the "
             "tokens after the first and excludes prefill; each prompt's rate is divided by the AR run's on the same "
             "prompt, and a cell is the geometric mean of those ratios over the prompts of one set with its 95% CI "
             "(a paired t interval on log rates), Holm over the cells of its table (one set and temperature; "
             f"analysis/rates.py; rates.csv){per_set}. Sets are never pooled. A CI covers the spread over prompts; "
             "it does not cover a drift of the machine between the AR run and a method's run, which are minutes "
             "apart on a shared VM. Timings depend on the machine and its load; another machine, or this one at "
             "another time, gives other ratios.")
    why = ("Why (costs.csv; a run's prompts summed, prefill included): a method beats AR exactly when its block "
           "efficiency exceeds the cost of its step, a target call with its drafting and the rest, in AR steps (the "
           "AR run's time per token on the same set). " + costs_sentence(costs) + " " + same_work_sentence(costs))
    parts = [intro, rates_sentence(rates), rates_markdown(rates) + "\n" + why, costs_markdown(costs)]
    if (out / "speedup.txt").is_file():
        parts += ["Interleaved check (speedup.txt): where a ratio above 1 had a CI that included 1, "
                  "benchmarks/speedup.py ran the method against AR on all 48 evaluation prompts of that set, "
                  "interleaved prompt by prompt, so a drift of the machine hits both alike. Its output, verbatim:",
                  "```\n" + (out / "speedup.txt").read_text().strip() + "\n```\n"]
    return "\n\n".join(parts)


def page(out: Path) -> str:
    """README.md of the edition in `out`, from its runs.csv, answers.csv, shared.csv, shared_means.csv, trend.csv,
    eagle.csv, control.csv, acceptance.csv, rates.csv, costs.csv and the expectation and selection tables alone."""
    runs, answers, shared = read_csv(out, "runs.csv"), read_csv(out, "answers.csv"), read_csv(out, "shared.csv")
    means = read_csv(out, "shared_means.csv")
    eagle, acceptance = read_csv(out, "eagle.csv"), read_csv(out, "acceptance.csv")
    claims = ", ".join(f"{method_label(h)} ≥ {method_label(lo)}" for h, lo in CLAIMS)
    counts = "; ".join(f"{dataset}, T = {t}, {budget or 'AR'}: {len(g)}" for (dataset, t, budget), g in
                       runs.fillna({"budget": ""}).groupby(["dataset", "temperature", "budget"], sort=True))
    ran = set(zip(runs["dataset"], runs["temperature"].astype(float), runs["budget"])) if len(runs) else set()
    missing = [f"{d} at T = {t}, {b.replace('_', ' ')}" for d, t, b in GRID if (d, t, b) not in ran]
    status = (f"In progress: the study's grid (experiments/study.sh) has no complete run yet for {'; '.join(missing)}."
              if missing else "Every part of the study's grid has complete runs.")
    return "\n".join([
        "# The third study: the embedded target with its feature head",
        "",
        status,
        "",
        f"Built from {len(runs)} complete runs ({counts or 'none yet'}; runs.csv). Every "
        "comparison below is generated from the CSVs in this folder by `python -m analysis.edition` "
        "(analysis/edition.py); tests/analysis/test_edition.py checks that this page is what they say.",
        "",
        "## The paper's orderings",
        "",
        f"The paper's order at every point, as adjacent claims: {claims}. Each is reproduced (ahead after Holm), "
        "reversed (behind after Holm), equal within ±0.05 tokens per call (the 95% CI of the paired difference "
        "inside ±0.05) or undecided. The CIs are per comparison; the p-values are Holm-adjusted over the questions "
        "of one table (its claims at every point of the budget kind; analysis/answers.py), and EAGLE-2's below "
        "over its own table. table_pairs.md compares every pair of methods, with Holm over all of them. Every "
        "difference here is a mean over prompts of per-prompt values (a per-request mean, each prompt weighing the "
        "same); the acceptance table below gives the token-weighted value beside it. An undecided cell's "
        "\"~N prompts\" is how many paired prompts would decide it if its observed gap and spread held "
        "(significant after Bonferroni over its table, or bounded within ±0.05, whichever needs fewer; normal "
        "approximation): a planning estimate for adding prompts, not a result. Every comparison on this page is "
        "within one prompt set: the three sets come from different prompt distributions, so none is averaged "
        "across them.",
        "",
        answers_sentence(answers),
        "",
        answers_markdown(answers),
        "## The same orderings at shared contexts",
        "",
        "At T > 0 two methods' runs on one prompt soon decode different text, and their difference then carries how "
        "predictable each one's own continuation happened to be. Here every method instead drafts and verifies one "
        "step at each prefix of the same continuation, the target's own sample (the AR run's output), and the next "
        "token is always that sample's (experiments/shared_contexts.py; docs/algorithms.md#shared-contexts). Each "
        "prompt's value is the mean exact expected yield over its contexts; its estimand weighs every position of "
        "the continuation once, where block efficiency weighs the contexts a method's own steps start at, so it "
        "answers the paper's per-step question (which draft and verifier accept more at the same context) rather "
        "than reproducing the measured block efficiency. Verdicts, CIs and Holm as above, Holm over each table.",
        "",
        ("" if shared.empty else answers_sentence(shared.assign(budget="fixed_length", x=shared["L"]),
                                                  noun="adjacent comparisons at shared contexts") + " "
         + widths_sentence(shared)),
        "",
        shared_markdown(shared),
        means_sentence(means),
        "",
        means_markdown(means),
        "## At fixed target compute: does RSD's lead over SpecTr grow with B?",
        "",
        trend_markdown(read_csv(out, "trend.csv")),
        "## EAGLE-2's dynamic tree against the paper's methods",
        "",
        "At a fixed draft length L, EAGLE-2's tree keeps N = 3L of its candidates (its shape tag kxLxN), as many "
        "nodes as the three-candidate trees of SpecInfer, SpecTr, RSD-C, TV and RSD-S, and SD's chain has L; at "
        "fixed target compute every method gets the same B.",
        "",
        ("No comparison yet." if eagle.empty else answers_sentence(eagle, EAGLE_WORDS, "comparisons")
         + " Holm runs over each table."),
        "",
        eagle_markdown(eagle),
        "## The draft as the control: feature head against draft v3",
        "",
        control_markdown(read_csv(out, "control.csv")),
        "## How close each verifier is to the optimum",
        "",
        included(out / "table_optimum.md", "No drafting run records its root optimum yet."),
        "The acceptance dial of the second edition has no counterpart here: a feature head reads the target's "
        "hidden states, so it cannot be mixed with the target.",
        "",
        "## Per-position acceptance",
        "",
        acceptance_markdown(acceptance),
        "## Shape selection at fixed target compute",
        "",
        first_paragraph(out / "table_selection.md", "No fixed-compute tuning runs yet.")
        + ("(every tuning run's scores: table_selection.md)\n" if (out / "table_selection.md").is_file() else ""),
        "## Measured against expected block efficiency",
        "",
        included(out / "table_expectation.md", "No drafting run records its exact expected yield yet."),
        "## Token rates",
        "",
        token_rates(out),
        "## Regenerating and resuming",
        "",
        "The records of every run are in runs/ as archives (rates/runs/, control/runs/ and shared/ hold the other "
        "passes'). `python -m analysis.regenerate docs/results/embedded-eagle --check` regenerates every generated "
        "file of this folder from those archives alone and compares each with the committed one, byte for byte "
        "(`--out DIR` writes them instead). To continue the study, `python -m analysis.archive unpack "
        "docs/results/embedded-eagle/runs results/study` (and the same for rates/runs, control/runs and shared) "
        "restores the records, and `RSD_STUDY=eagle experiments/study.sh` decodes only what is missing of the "
        "study's grid (every stage) and regenerates this folder.",
        "",
    ])


def write_edition(results: Sequence[Path | str], out: Path, control: Path | None = None,
                  shared: Path | None = None, rates: Path | None = None) -> list[Path]:
    """The report of `results` in `out` (compact), then answers.csv, trend.csv, eagle.csv, acceptance.csv, with
    `control` (the v3 control pass's results) control.csv and its report in control/, with `shared` (the
    shared-context records) shared.csv, with `rates` (the quiet token-rate pass's results) rates.csv, costs.csv and
    its report in rates/, and README.md. Every report compares within one prompt set (none pools sets)."""
    def sub_report(source: Path | None, folder: str):  # per set, like the page's own report
        return None if source is None else build_report([source], out / folder, compact=True, pool_sets=False)

    timed, ctl = sub_report(rates, "rates"), sub_report(control, "control")  # before the page, which links them
    written = [path for sub in (timed, ctl) if sub is not None for path in sub.files]
    report = build_report(results, out, compact=True, pool_sets=False)
    if ctl is not None:
        frame = control_rows((report.tables.runs, report.tables.prompts), (ctl.tables.runs, ctl.tables.prompts))
        frame.to_csv(out / "control.csv", index=False)
        written.append(out / "control.csv")
    answers = ordering_answers(report.pairs) if len(report.pairs) else pd.DataFrame()
    written += report.files
    trend = trend_rows(best_shapes(report.tables.runs, report.tables.prompts, errors=False), report.tables.prompts,
                       pool_sets=False)
    for name, frame in (("answers.csv", answers), ("eagle.csv", eagle_rows(report.pairs)), ("trend.csv", trend),
                        ("acceptance.csv", acceptance_frame(report.tables))):
        frame.to_csv(out / name, index=False)
        written.append(out / name)
    if shared is not None:
        records = load_shared(shared)
        with_own_widths(shared_answers(records), answers).to_csv(out / "shared.csv", index=False)
        shared_means(records, report.tables.runs).to_csv(out / "shared_means.csv", index=False)
        written += [out / "shared.csv", out / "shared_means.csv"]
    if timed is not None:
        rate_ratios(timed.tables.prompts, timed.tables.runs).to_csv(out / "rates.csv", index=False)
        step_costs(timed.tables.runs).to_csv(out / "costs.csv", index=False)
        written += [out / "rates.csv", out / "costs.csv"]
    (out / "README.md").write_text(page(out))
    return [*written, out / "README.md"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.edition", description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="results directories (e.g. results/study/embedded-eagle)")
    parser.add_argument("--out", type=Path, required=True, help="the edition's folder")
    parser.add_argument("--control", type=Path, help="the control pass's results (draft v3 on the same prompts)")
    parser.add_argument("--shared", type=Path, help="the shared-context records (experiments/shared_contexts.py)")
    parser.add_argument("--rates", type=Path, help="the quiet token-rate pass's results (the study's rates stage)")
    args = parser.parse_args(argv)
    files = write_edition(args.results, args.out, args.control, args.shared, args.rates)
    print(f"edition ({len(files)} files): {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
