"""table_pairs.md: the paired comparisons as text, a ranking line per budget point and a pipe table per family."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from analysis.columns import DIAL_NOTE, SETTING
from analysis.names import KINDS, method_label, setting_title
from analysis.pairs import rank_column
from analysis.stats import ALPHA, PAIR_METRICS


def fmt_p(p: float) -> str:
    """'p=0.003', 'p<0.001', 'p=–' for NaN."""
    if not np.isfinite(p):
        return "p=–"
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def ranking_line(best_at_point: pd.DataFrame, pairs_at_point: pd.DataFrame) -> str:
    """The methods of one budget point, best first, each with the Holm-adjusted p of its gap to the one above.

    'RSD-S > RSD-C (p=0.003) > SpecTr (n.s., p=0.412)': '>' orders the means ('=' where they are equal, as greedy
    methods often are); '(n.s.)' marks a gap not significant at ALPHA after Holm. With several seeds, a gap's p is the
    largest over seeds (significant only if every seed's is).
    """
    drafted = best_at_point[best_at_point["budget"].notna()]
    by = rank_column(drafted)
    ranked = drafted.sort_values(by, ascending=False, kind="stable")
    order, means = ranked["method"].tolist(), ranked[by].to_numpy(float)
    text = method_label(order[0]) if order else ""
    for i, (hi, lo) in enumerate(zip(order, order[1:])):
        gap = pairs_at_point  # either orientation: the two-sided p does not depend on it
        if len(gap):
            gap = gap[((gap["first"] == hi) & (gap["second"] == lo)) | ((gap["first"] == lo) & (gap["second"] == hi))]
        p = float(gap[f"{by}_p_holm"].max()) if len(gap) else math.nan  # no pair: not compared, so n.s.
        note = fmt_p(p) if np.isfinite(p) and p <= ALPHA else f"n.s., {fmt_p(p)}"
        text += f" {'=' if np.isclose(means[i], means[i + 1], rtol=0, atol=1e-12) else '>'} {method_label(lo)} ({note})"
    return text + f"  [ranked by {'expected' if by.startswith('expected') else 'measured'} BE]"


def ranking_lines(best: pd.DataFrame, pairs: pd.DataFrame) -> dict[tuple, list[str]]:
    """Per (setting, budget kind): one ranking line per budget point, 'L=2: RSD-S > ...'."""
    lines: dict[tuple, list[str]] = {}
    drafted = best[best["budget"].notna()]
    for keys, group in drafted.groupby([*SETTING, "budget"], sort=True):
        out = []
        for x, point in group.groupby("x", sort=True):
            sel = pairs
            if len(pairs):
                mask = (pairs["kind"] == "best shape") & (pairs["budget"] == keys[-1]) & (pairs["x"] == x)
                for k, v in zip(SETTING, keys):
                    mask &= pairs[k] == v
                sel = pairs[mask]
            out.append(f"{KINDS[keys[-1]][1]}={x}: {ranking_line(point, sel)}")
        lines[keys] = out
    return lines


def diff_cell(row: Mapping, metric: str) -> str:
    """'+0.21 [+0.08, +0.34], p=0.002, Holm p=0.010' (' n.s.' appended when Holm's p > ALPHA); '–' if missing."""
    if not row[f"{metric}_n"] or not np.isfinite(row[f"{metric}_diff"]):
        return "–"
    ci = (f" [{row[f'{metric}_low']:+.2f}, {row[f'{metric}_high']:+.2f}]"
          if np.isfinite(row[f"{metric}_low"]) else "")
    mark = "" if np.isfinite(row[f"{metric}_p_holm"]) and row[f"{metric}_p_holm"] <= ALPHA else " n.s."
    return f"{row[f'{metric}_diff']:+.2f}{ci}, {fmt_p(row[f'{metric}_p'])}, Holm {fmt_p(row[f'{metric}_p_holm'])}{mark}"


def pairs_caption(family: pd.DataFrame) -> str:
    """What a pair table's cells are, which rate it uses and how its shapes were chosen."""
    rates = set(family["rate"])
    rate = ("decode token rate (tokens after the first / decode seconds, prefill excluded)" if rates == {
        "decode_token_rate"} else "token rate (generated tokens / wall seconds, prefill included)"
            + ("; rows marked ᵈ use the decode rate, recorded by both runs" if "decode_token_rate" in rates else ""))
    return ("Each cell: mean over prompts of the per-prompt difference (first method minus second), its 95% t "
            "interval, the paired t-test's p-value, and the p-value after Holm's correction over all comparisons of "
            f"this table (per metric; {ALPHA:g} family-wise); 'n.s.': not significant after Holm. n: prompts both runs "
            f"decoded. Token rate: {rate}. Shapes: the cell of the tables; 'tuned' = selected on tuning prompts "
            "disjoint from these, 'best of N' = best of N shapes on these same prompts (biased upward)."
            + (f" MBSU and token rate: {DIAL_NOTE}" if family["mix"].ne("").any() else ""))


def pairs_table(family: pd.DataFrame) -> str:
    """One family's comparisons as a pipe table, points in order, then pairs in ranking order."""
    symbol = KINDS[family["budget"].iloc[0]][1]
    lines = ["| point | comparison | shapes (how chosen) | n | " + " | ".join(PAIR_METRICS.values()) + " |",
             "|---|---|---|---:|" + "---|" * len(PAIR_METRICS)]
    for _, row in family.sort_values("x", kind="stable").iterrows():
        mark = "ᵈ" if row["rate"] == "decode_token_rate" and set(family["rate"]) != {"decode_token_rate"} else ""
        lines.append(f"| {symbol}={row['x']} | {method_label(row['first'])} − {method_label(row['second'])} | "
                     f"{row['chosen']} | {int(row['block_efficiency_n'])} | "
                     + " | ".join(diff_cell(row, m) + (mark if m == "token_rate" else "") for m in PAIR_METRICS)
                     + " |")
    return "\n".join(lines)


def pairs_markdown(best: pd.DataFrame, pairs: pd.DataFrame) -> str:
    """table_pairs.md: per (setting, budget kind) the ranking line per budget point, then per seed the best-shape
    comparisons and the same-draft (verifier) comparisons."""
    if pairs.empty:
        return "No two drafting methods were run on the same prompts, setting, seed and budget point.\n"
    lines_of = ranking_lines(best, pairs)
    parts = ["# Paired comparisons of methods on the same prompts", "",
             "Ranking lines: methods at each budget point ordered by their mean (expected block efficiency where "
             "every method records it, else measured); after each method, the Holm-adjusted p-value of its gap to "
             "the method before it (paired t-test over prompts); 'n.s.' = not significant at 0.05. Where several "
             "seeds were run, a gap counts only if it is significant for every seed.", ""]
    for keys, family in pairs.groupby([*SETTING, "budget"], sort=True):
        setting = dict(zip(SETTING, keys))
        kind = keys[-1]
        parts += [f"## {setting_title(setting)}; {KINDS[kind][0]}", ""]
        parts += [f"- {line}" for line in lines_of.get(keys, [])] + [""]
        for (seed, comparison), sub in family.groupby(["seed", "kind"], sort=True):
            what = ("Best shape per method" if comparison == "best shape" else
                    "Same drafts, two verifiers (BV vs SD on the same chains, TV vs RSD-C on the same trees)")
            parts += [f"### {what}; seed {seed}", "", pairs_caption(sub), "", pairs_table(sub), ""]
    return "\n".join(parts)
