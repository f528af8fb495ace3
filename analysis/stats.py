"""Paired comparisons of two runs on their common prompts: per-prompt differences, 95% t intervals, the paired
t-test's p-values and Holm's step-down correction.

For each metric, the difference (first minus second run) is averaged over prompts, with a two-sided 95% t interval
and the p-value of the paired t-test (a t-test of the differences against 0).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

ALPHA = 0.05
PAIR_METRICS = {  # column -> display name
    "expected_block_efficiency": "expected BE",
    "block_efficiency": "measured BE",
    "mbsu": "MBSU",
    "token_rate": "token rate (tok/s)",
}


@dataclass(frozen=True)
class Paired:
    """A paired comparison: n prompts, mean difference, its 95% CI, the paired t-test's two-sided p-value."""

    n: int
    mean: float
    low: float
    high: float
    p: float


def paired(first: Sequence[float], second: Sequence[float], confidence: float = 0.95) -> Paired:
    """Paired comparison of two aligned samples (differences first - second); pairs with a NaN are dropped.

    Fewer than two pairs give NaN interval and p. Identical differences (zero spread) give a zero-width interval
    and p = 1 when they are all 0, p = 0 otherwise (the t statistic is 0 or infinite).
    """
    diff = np.asarray(first, dtype=float) - np.asarray(second, dtype=float)
    diff = diff[np.isfinite(diff)]
    n = len(diff)
    if n == 0:
        return Paired(0, math.nan, math.nan, math.nan, math.nan)
    mean = float(diff.mean())
    if n < 2:
        return Paired(1, mean, math.nan, math.nan, math.nan)
    se = float(diff.std(ddof=1) / math.sqrt(n))
    if se == 0:
        return Paired(n, mean, mean, mean, 1.0 if mean == 0 else 0.0)
    half = float(sps.t.ppf(0.5 + confidence / 2, n - 1)) * se
    return Paired(n, mean, mean - half, mean + half, float(sps.ttest_1samp(diff, 0.0).pvalue))


def holm(pvalues: Iterable[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (same order as given); NaNs stay NaN and do not count in the family size.

    With m finite p-values sorted ascending p_(1) <= ... <= p_(m): adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)).
    Rejecting where adj <= alpha controls the family-wise error rate at alpha.
    """
    p = np.asarray(list(pvalues), dtype=float)
    adjusted = np.full_like(p, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    m = len(order)
    running = 0.0
    for i, idx in enumerate(order):
        running = max(running, min(1.0, (m - i) * p[idx]))
        adjusted[idx] = running
    return adjusted


def prompt_values(prompts: pd.DataFrame, run_dirs: Iterable[str], metric: str) -> pd.Series:
    """A metric per (dataset, prompt id) over the given runs (one run per dataset and seed, so the keys are unique)."""
    rows = prompts[prompts["run_dir"].isin(list(run_dirs))]
    return rows.set_index(["dataset", "prompt_id"])[metric]


def rate_metric(prompts: pd.DataFrame, runs: Iterable[str]) -> str:
    """'decode_token_rate' when every prompt of these runs has it (the rate without prefill), else 'token_rate'."""
    rows = prompts[prompts["run_dir"].isin(list(runs))]
    return "decode_token_rate" if len(rows) and np.isfinite(rows["decode_token_rate"].to_numpy(float)).all() \
        else "token_rate"


def compare(prompts: pd.DataFrame, first: str | Sequence[str], second: str | Sequence[str]) -> dict:
    """Every PAIR_METRICS comparison of run `first` against run `second` (or of two lists of runs, one per dataset)
    on their common prompts.

    Columns per metric: `<m>_n`, `<m>_diff`, `<m>_low`, `<m>_high`, `<m>_p`; the token-rate metric is the decode
    rate when both runs record it (`rate` names the one used).
    """
    first, second = ([first] if isinstance(first, str) else list(first)), (
        [second] if isinstance(second, str) else list(second))
    # each side's prompts selected once, not once per metric (the report compares hundreds of pairs)
    a_rows, b_rows = (prompts[prompts["run_dir"].isin(runs)].set_index(["dataset", "prompt_id"])
                      for runs in (first, second))
    rate = rate_metric(pd.concat([a_rows, b_rows]), [*first, *second])
    common = a_rows.index.intersection(b_rows.index)
    out: dict = {"rate": rate}
    for metric in PAIR_METRICS:
        column = rate if metric == "token_rate" else metric
        res = paired(a_rows[column].loc[common].to_numpy(float), b_rows[column].loc[common].to_numpy(float))
        out.update({f"{metric}_n": res.n, f"{metric}_diff": res.mean, f"{metric}_low": res.low,
                    f"{metric}_high": res.high, f"{metric}_p": res.p})
    return out
