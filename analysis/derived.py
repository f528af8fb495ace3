"""Columns computed across runs once every run is read: ratios to the matching AR run, the dial's speeds left out,
greedy output against AR's, standard errors over prompts.

Ratios are to the AR run with the same model pair, dtype, dataset, sampling settings and seed; per-prompt ratios
divide a prompt's value by that AR run's value. A dial run (model_pair.mix set) whose draft model ran has its speed
metrics (SPEED) set to NaN and `speed_omitted` True: the dial's draft forward also runs the target, so its token
rate and MBSU do not measure speed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from analysis.columns import AR_KEYS, NAN, SPEED
from analysis.names import is_greedy

log = logging.getLogger(__name__)

SE_METRICS = ("block_efficiency", "expected_block_efficiency", "mbsu", "token_rate", "decode_token_rate")


def ar_baselines(runs: pd.DataFrame) -> pd.DataFrame:
    """Per AR_KEYS: the AR token rate, decode token rate and accuracy (mean if several AR runs match)."""
    ar = runs[runs["method"] == "ar"]
    means = ar.groupby(list(AR_KEYS), dropna=False)[["token_rate", "decode_token_rate", "accuracy"]].mean()
    return means.rename(columns=lambda c: f"ar_{c}").reset_index()


def dial_drafting(runs: pd.DataFrame) -> pd.Series:
    """Dial runs (mix set) that call their draft model: the dial's draft forward also runs the target, so their
    speeds mean nothing (AR and model-free drafters keep theirs)."""
    return runs["mix"].ne("") & runs["draft_calls"].gt(0)


def warn_missing_ar(runs: pd.DataFrame) -> None:
    """Warn once per setting and seed that has runs but no AR run (its ratios are NaN).

    Tuning runs (shapes are selected by block efficiency, never by rate) and dial runs that call their draft model
    (dial_drafting: omit_dial_speed drops their rates) have no AR run by design and are not warned about.
    """
    by_design = runs["selection_role"].eq("tune") | dial_drafting(runs)
    for keys, group in runs[runs["ar_token_rate"].isna() & ~by_design].groupby(list(AR_KEYS), dropna=False):
        setting = ", ".join(f"{k}={v}" for k, v in zip(AR_KEYS, keys))
        log.warning("no AR run for %s: token-rate and accuracy ratios of its %d run(s) are NaN", setting, len(group))


def add_ratios(runs: pd.DataFrame, prompts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Add token_rate_ratio, decode_token_rate_ratio and accuracy_ratio (to the matching AR run) to both tables."""
    runs = runs.merge(ar_baselines(runs), on=list(AR_KEYS), how="left")
    warn_missing_ar(runs)
    base = ["ar_token_rate", "ar_decode_token_rate", "ar_accuracy"]
    prompts = prompts.merge(runs[["run_dir", *base]], on="run_dir", how="left")
    for frame, score in ((runs, "accuracy"), (prompts, "score")):
        frame["token_rate_ratio"] = frame["token_rate"] / frame["ar_token_rate"]
        frame["decode_token_rate_ratio"] = frame["decode_token_rate"] / frame["ar_decode_token_rate"]
        frame["accuracy_ratio"] = frame[score] / frame["ar_accuracy"]
    return runs.drop(columns=base), prompts.drop(columns=base)


def omit_dial_speed(runs: pd.DataFrame, prompts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both tables with SPEED set to NaN for the dial_drafting runs, flagged by `speed_omitted`."""
    omitted = dial_drafting(runs)
    dirs = set(runs.loc[omitted, "run_dir"])
    runs, prompts = runs.assign(speed_omitted=omitted), prompts.assign(speed_omitted=prompts["run_dir"].isin(dirs))
    for frame in (runs, prompts):
        frame.loc[frame["speed_omitted"], list(SPEED)] = NAN
    return runs, prompts


def first_divergence(ids: list[int], reference: list[int]) -> float:
    """The first token position (0-based) where `ids` differs from `reference`; NaN when they are identical.

    A sequence that stops earlier (EOS) diverges at the shorter length.
    """
    for i, (a, b) in enumerate(zip(ids, reference)):
        if a != b:
            return float(i)
    return NAN if len(ids) == len(reference) else float(min(len(ids), len(reference)))


def greedy_divergence(runs: pd.DataFrame, prompts: pd.DataFrame, tokens: Mapping[str, Mapping[Any, list[int]]]
                      ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Greedy runs vs the AR run of the same setting and seed, prompt by prompt (issue 12: in half precision a
    verify pass over k tokens rounds differently from k one-token passes, so greedy identity holds only in float32).

    Prompts gain `greedy_divergence` (first differing position, NaN if identical or not checked) and
    `greedy_checked`; runs gain `greedy_prompts` (checked), `greedy_diverged` (prompts that differ) and
    `greedy_first_divergence` (earliest position over its prompts, NaN if none differs).
    """
    ar_dirs = {tuple(row[k] for k in AR_KEYS): row["run_dir"] for _, row in runs[runs["method"] == "ar"].iterrows()}
    div, checked = [], []
    for _, row in prompts.iterrows():
        ar_dir = ar_dirs.get(tuple(row[k] for k in AR_KEYS))
        ours = tokens[row["run_dir"]].get(row["prompt_id"])
        ref = tokens[ar_dir].get(row["prompt_id"]) if ar_dir else None
        ok = (is_greedy(row) and row["method"] != "ar" and ours is not None and ref is not None)
        checked.append(ok)
        div.append(first_divergence(ours, ref) if ok else NAN)
    prompts = prompts.assign(greedy_divergence=div, greedy_checked=checked)
    per_run = prompts[prompts["greedy_checked"]].groupby("run_dir").agg(
        greedy_prompts=("prompt_id", "size"), greedy_diverged=("greedy_divergence", "count"),
        greedy_first_divergence=("greedy_divergence", "min"))
    runs = runs.merge(per_run, left_on="run_dir", right_index=True, how="left")
    runs[["greedy_prompts", "greedy_diverged"]] = runs[["greedy_prompts", "greedy_diverged"]].fillna(0).astype(int)
    return runs, prompts


def add_standard_errors(runs: pd.DataFrame, prompts: pd.DataFrame) -> pd.DataFrame:
    """`<metric>_se` per SE_METRICS: standard error over the run's prompts (NaN with fewer than two finite values)."""
    def se(values: pd.Series) -> float:
        finite = values[np.isfinite(values.to_numpy(float))]
        return float(finite.std(ddof=1) / np.sqrt(len(finite))) if len(finite) > 1 else NAN

    errors = prompts.groupby("run_dir")[list(SE_METRICS)].agg(se).add_suffix("_se")
    return runs.merge(errors, left_on="run_dir", right_index=True, how="left")
