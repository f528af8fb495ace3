"""Whether a gap between two methods grows with the target-compute budget B (the paper: RSD's lead over SpecTr grows).

The budget points share their prompts, so their per-point CIs cannot be combined. Instead, per prompt, the
least-squares slope over B of that prompt's difference (higher - lower, at every point both methods ran); the mean
slope over prompts, with a 95% t interval and the t-test's p, is the trend (prompts are the independent units).
It is reported as the change of the gap across the grid (slope x (largest B - smallest B)). Pooled over datasets, the
per-prompt slopes of every set are tested together. Holm's correction runs over every row of the table.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.answers import ALPHA, signed
from analysis.columns import SETTING
from analysis.names import method_label
from analysis.stats import holm, paired, prompt_values

TREND_CLAIMS = (("rsd_s", "spectr"), ("rsd_c", "spectr"))
OTHER = [k for k in SETTING if k not in ("dataset", "prompt_set")]


def prompt_gaps(best: pd.DataFrame, prompts: pd.DataFrame, higher: str, lower: str, metric: str) -> pd.DataFrame:
    """Per (dataset, prompt id) row and budget point column: higher - lower at the points both ran (seeds averaged)."""
    columns = {}
    for x, at in best.groupby("x", sort=True):
        a, b = (at[at["method"] == m] for m in (higher, lower))
        if a.empty or b.empty:
            continue
        va, vb = (prompt_values(prompts, [d for dirs in rows["run_dirs"] for d in dirs], metric)
                  .groupby(level=[0, 1]).mean() for rows in (a, b))
        columns[int(x)] = va - vb
    return pd.DataFrame(columns)


def slopes(gaps: pd.DataFrame) -> np.ndarray:
    """Each row's least-squares slope over its finite columns (NaN with fewer than two)."""
    out = []
    for _, row in gaps.iterrows():
        row = row.dropna()
        out.append(np.polyfit(row.index.to_numpy(float), row.to_numpy(float), 1)[0] if len(row) > 1 else np.nan)
    return np.asarray(out, dtype=float)


def trend_rows(best: pd.DataFrame, prompts: pd.DataFrame, metric: str = "expected_block_efficiency",
               claims: Sequence[tuple[str, str]] = TREND_CLAIMS, pool_sets: bool = True) -> pd.DataFrame:
    """One row per setting (each dataset, and with `pool_sets` pooled over the datasets that ran) and claim at fixed
    compute: the points, the mean gap at the smallest and largest B, the change across the grid with its CI, p and
    Holm p."""
    fixed = best[best["budget"] == "fixed_compute"]
    rows = []
    for keys, group in fixed.groupby(OTHER, sort=True, dropna=False):  # seeds are pooled in `best`
        for higher, lower in claims:
            per_set = {ds: prompt_gaps(g, prompts, higher, lower, metric) for ds, g in group.groupby("dataset")}
            per_set = {ds: gaps for ds, gaps in per_set.items() if gaps.shape[1] > 1}
            if pool_sets and len(per_set) > 1:
                per_set["+".join(sorted(per_set))] = pd.concat(per_set.values())
            for dataset, gaps in per_set.items():
                span = gaps.columns.max() - gaps.columns.min()
                change = paired(slopes(gaps) * span, np.zeros(len(gaps)))
                rows.append({**dict(zip(OTHER, keys)), "dataset": dataset, "higher": higher,
                             "lower": lower, "metric": metric, "points": ",".join(map(str, gaps.columns)),
                             "gap_first": float(gaps[gaps.columns.min()].mean()),
                             "gap_last": float(gaps[gaps.columns.max()].mean()), "n": change.n,
                             "change": change.mean, "low": change.low, "high": change.high, "p": change.p})
    frame = pd.DataFrame(rows)
    if len(frame):
        frame["p_holm"] = holm(frame["p"])
    return frame


def verdict(row: pd.Series) -> str:
    if row["p_holm"] < ALPHA:
        return "the gap grows with B" if row["change"] > 0 else "the gap shrinks with B"
    return "no trend detected"


def trend_markdown(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "No fixed-compute grid with two or more budget points for these methods yet.\n"
    lines = ["| set | T | gap | B | gap at first B | gap at last B | change across the grid (95% CI) | Holm p | |",
             "|---|---|---|---|---:|---:|---|---:|---|"]
    for _, r in frame.iterrows():
        points = r["points"].split(",")
        lines.append(f"| {r['dataset']} | {r['temperature']} | {method_label(r['higher'])} − "
                     f"{method_label(r['lower'])} | {points[0]}..{points[-1]} | {signed(r['gap_first'])} | "
                     f"{signed(r['gap_last'])} | {signed(r['change'])} ({signed(r['low'])}, {signed(r['high'])}), "
                     f"n = {int(r['n'])} | {r['p_holm']:.3f} | {verdict(r)} |")
    return "\n".join(lines) + "\n\n" + (
        f"Gaps in {frame['metric'].iloc[0]} (tokens per target call). The change is the mean over prompts of each "
        "prompt's least-squares slope of the gap over B, times the grid's span of B (analysis/trend.py).\n")
