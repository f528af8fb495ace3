"""The paper's orderings at shared contexts (docs/algorithms.md#shared-contexts): every method's exact expected yield
at each prefix of the same reference continuation (experiments/shared_contexts.py), paired per prompt.

    python -m analysis.shared pack results/study/embedded-eagle-shared docs/results/embedded-eagle/shared
    python -m analysis.archive unpack docs/results/embedded-eagle/shared results/study

analysis.edition reads the records (its --shared) into shared.csv and the page's shared-context section.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.answers import CLAIMS, Answer, claims_table, signed
from analysis.archive import archive_bytes, archive_name
from analysis.names import method_label
from analysis.stats import holm, paired
from rsd.harness.files import write_bytes_atomic

FAMILY = ("dataset", "temperature")


def load_shared(root: Path) -> pd.DataFrame:
    """One row per dataset, temperature, L, method and prompt: the mean exact expected yield over the prompt's
    contexts (`shared`), for the methods that have every prompt of their dataset and temperature. Raises if two
    methods of one prompt replayed different references."""
    rows = []
    for path in sorted(Path(root).glob("*/T*/L*/*.jsonl")):
        dataset, temperature, length = path.parts[-4], float(path.parts[-3][1:]), int(path.parts[-2][1:])
        for line in path.read_text().splitlines():
            record = json.loads(line)
            rows.append({"dataset": dataset, "temperature": temperature, "L": length, "method": record["method"],
                         "prompt_id": record["prompt_id"], "contexts": len(record["expected_emitted"]),
                         "shared": float(np.mean(record["expected_emitted"])),
                         "reference": tuple(record["reference"])})
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    references = frame.groupby(["dataset", "temperature", "prompt_id"])["reference"].nunique()
    if (references > 1).any():
        bad = references[references > 1].index[0]
        raise ValueError(f"shared contexts: the methods of prompt {bad[2]!r} ({bad[0]}, T = {bad[1]}) replayed "
                         "different references; rerun them from one reference (experiments/shared_contexts.py)")
    # a method at an L enters once it has every prompt of its set's most complete one (a pass still running)
    counts = frame.groupby(["dataset", "temperature", "L", "method"])["prompt_id"].transform("size")
    full = frame.groupby(["dataset", "temperature"])["prompt_id"].transform("nunique")
    return frame[counts == full].drop(columns="reference").reset_index(drop=True)


def shared_answers(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per dataset, temperature, L and claim of the paper's order that both methods ran on the same prompts:
    the paired difference of per-prompt shared-context yields, its 95% CI, p, p after Holm over the claims at every
    L of its dataset and temperature, and the verdict (analysis.answers.Answer)."""
    rows = []
    for keys, family in frame.groupby(list(FAMILY), sort=True):
        answers = []
        for length, at in family.groupby("L", sort=True):
            wide = at.pivot(index="prompt_id", columns="method", values="shared")
            for higher, lower in CLAIMS:
                if higher in wide and lower in wide:
                    both = wide[[higher, lower]].dropna()
                    cmp = paired(both[higher], both[lower])
                    answers.append((length, Answer(higher, lower, cmp.mean, cmp.low, cmp.high, cmp.p, cmp.n)))
        family_size = sum(np.isfinite(a.p) for _, a in answers)
        for (length, answer), p_holm in zip(answers, holm([a.p for _, a in answers])):
            verdict = answer.verdict(float(p_holm))
            rows.append({**dict(zip(FAMILY, keys)), "L": length, **answer.__dict__, "p_holm": float(p_holm),
                         "verdict": verdict,
                         "prompts_to_decide": answer.prompts_to_decide(family_size) if verdict == "undecided"
                         else None})
    return pd.DataFrame(rows)


def with_own_widths(answers: pd.DataFrame, own: pd.DataFrame) -> pd.DataFrame:
    """`answers` with `own_width`: the 95% CI width of the same claim in the own-context runs (answers.csv of the
    edition, fixed length), on the same number of prompts, NaN where that claim has no own-context answer."""
    if answers.empty:
        return answers.assign(own_width=pd.Series(dtype=float))
    fixed = own[(own["budget"] == "fixed_length")] if len(own) else own
    width = {(r.dataset, float(r.temperature), int(r.x), r.higher, r.lower, int(r.n)): r.high - r.low
             for r in fixed.itertuples()}
    return answers.assign(own_width=[width.get((r.dataset, float(r.temperature), int(r.L), r.higher, r.lower,
                                                int(r.n)), np.nan) for r in answers.itertuples()])


def shared_markdown(answers: pd.DataFrame) -> str:
    """Per dataset and temperature: one row per L, one column per claim (higher − lower, 95% CI, Holm p, verdict),
    then each claim's CI width against the own-context runs' on the same prompts."""
    if answers.empty:
        return "The shared-context pass (experiments/shared_contexts.py) has not run yet.\n"
    out = []
    for (dataset, temperature), group in answers.groupby(list(FAMILY), sort=True):
        title = (f"**{dataset}, T = {temperature:g}, shared contexts** (mean exact expected yield per call, "
                 f"higher − lower, 95% CI, Holm p; {int(group['n'].max())} prompts)")
        out.append(claims_table(group, title, "L", str, "L"))
    return "\n\n".join(out) + "\n"


def widths_sentence(answers: pd.DataFrame) -> str:
    """The median ratio of own-context to shared-context CI widths over the claims both have, with its range."""
    both = answers.dropna(subset=["own_width"]) if "own_width" in answers else answers.iloc[0:0]
    both = both[(both["high"] > both["low"])]
    if both.empty:
        return "No claim has both a shared-context and an own-context answer on the same prompts yet."
    ratio = both["own_width"] / (both["high"] - both["low"])
    return (f"On the same prompts, the own-context runs' 95% CIs are {ratio.median():.1f} times as wide as the "
            f"shared-context ones (median over {len(ratio)} claim(s); from {ratio.min():.1f} to {ratio.max():.1f}): "
            f"the equivalent of about {ratio.median() ** 2:.0f} times as many own-context prompts.")


def shared_means(frame: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Per dataset, temperature, L and method: the mean over prompts of the shared-context yield and, beside it, the
    own-context runs' per-request expected block efficiency (runs.csv, fixed length; NaN where none ran)."""
    if frame.empty:
        return pd.DataFrame()
    means = frame.groupby(["dataset", "temperature", "L", "method"], as_index=False).agg(
        shared=("shared", "mean"), n=("shared", "size"))
    own = {}
    if len(runs):
        fixed = runs[runs["budget"] == "fixed_length"]
        own = {(r.dataset, float(r.temperature), int(r.x), r.method): (r.expected_block_efficiency_prompt_mean,
                                                                      r.expected_block_efficiency_se)
               for r in fixed.itertuples()}
    values = [own.get((r.dataset, float(r.temperature), int(r.L), r.method), (np.nan, np.nan))
              for r in means.itertuples()]
    return means.assign(own=[v[0] for v in values], own_se=[v[1] for v in values])


def means_markdown(means: pd.DataFrame) -> str:
    """Per dataset and temperature: one row per L, one column per method, 'shared / own' mean yields per call."""
    if means.empty:
        return ""
    out = []
    order = [m for _, m in CLAIMS[::-1]] + [CLAIMS[0][0]]
    for (dataset, temperature), group in means.groupby(list(FAMILY), sort=True):
        methods = [m for m in order if m in set(group["method"])]
        lines = [f"**{dataset}, T = {temperature:g}**: mean yield per call at shared contexts / the own-context runs' "
                 "expected block efficiency (per request; – where the own-context run is not complete)", "",
                 "| L | " + " | ".join(method_label(m) for m in methods) + " |", "|---|" + "---|" * len(methods)]
        for length, at in group.groupby("L", sort=True):
            cells = []
            for method in methods:
                row = at[at["method"] == method]
                if row.empty:
                    cells.append("–")
                    continue
                own = row["own"].iloc[0]
                cells.append(f"{row['shared'].iloc[0]:.3f} / " + ("–" if pd.isna(own) else f"{own:.3f}"))
            lines.append(f"| {length} | " + " | ".join(cells) + " |")
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def means_sentence(means: pd.DataFrame) -> str:
    """How far the shared-context means lie from the own-context expected block efficiencies, in standard errors of
    the latter."""
    both = means.dropna(subset=["own", "own_se"]) if len(means) else means
    if both.empty:
        return ""
    gap = both["shared"] - both["own"]
    z = gap / both["own_se"]
    return (f"How close the two estimands are: over the {len(both)} method and L cells with both, the shared-context "
            f"mean differs from the own-context expected block efficiency by {signed(gap.mean())} on average (from "
            f"{signed(gap.min())} to {signed(gap.max())}; {int((z.abs() > 1.96).sum())} of {len(both)} beyond 1.96 "
            "standard errors of the latter).")


def headline(answers: pd.DataFrame) -> str:
    """The README's sentence on the shared-context answers (tests/analysis/test_shared.py checks it is there)."""
    parts = []
    for (dataset, temperature), group in answers.groupby(list(FAMILY), sort=True):
        counts = group["verdict"].value_counts()
        decided = len(group) - int(counts.get("undecided", 0))
        parts.append(f"{dataset} at T = {temperature:g} ({int(group['n'].max())} prompts): {decided} of {len(group)} "
                     f"adjacent comparisons decided ({int(counts.get('reproduced', 0))} reproduced, "
                     f"{int(counts.get('reversed', 0))} reversed, {int(counts.get('equal within ±0.05', 0))} equal "
                     "within ±0.05)")
    if not parts:
        return ""
    return "At shared contexts, " + "; ".join(parts) + "." + undecided_sentence(answers)


def undecided_sentence(answers: pd.DataFrame) -> str:
    """' Undecided: <claim> (<dataset> L = ...; ...); deciding them would take up to ~N prompts per set.' or ''."""
    open_ = answers[answers["verdict"] == "undecided"]
    if open_.empty:
        return ""
    claims = []
    for (higher, lower), group in open_.groupby(["higher", "lower"], sort=False):
        where = "; ".join(f"{dataset} L = {', '.join(str(int(x)) for x in sorted(rows['L']))}"
                          for dataset, rows in group.groupby("dataset", sort=True))
        claims.append(f"{method_label(higher)} ≥ {method_label(lower)} ({where})")
    return (f" Undecided: {', '.join(claims)}; deciding them would take up to "
            f"~{int(open_['prompts_to_decide'].max())} prompts per set.")


def pack_shared(root: Path, out: Path) -> list[Path]:
    """One records archive per dataset and temperature of `root` into `out` (byte-identical when its records did not
    change: analysis.archive); returns those written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for setting in sorted(p for p in Path(root).glob("*/T*") if p.is_dir()):
        target, data = out / archive_name(root, setting), archive_bytes(root, setting)
        if not (target.exists() and target.read_bytes() == data):
            write_bytes_atomic(target, data)
            written.append(target)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.shared", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    pack = sub.add_parser("pack", help="the shared-context records -> one archive per dataset and temperature")
    pack.add_argument("root", type=Path, help="results/study/embedded-eagle-shared")
    pack.add_argument("out", type=Path, help="docs/results/embedded-eagle/shared")
    args = parser.parse_args(argv)
    print(f"{len(pack_shared(args.root, args.out))} archive(s) written in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
