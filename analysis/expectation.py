"""The check behind table_expectation.md: measured against exact expected block efficiency, run by run."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis.columns import SETTING
from analysis.names import method_label, setting_title
from analysis.pair_tables import fmt_p
from analysis.stats import ALPHA


def expectation_check(runs: pd.DataFrame, prompts: pd.DataFrame) -> str:
    """table_expectation.md: does the exact expected block efficiency agree with the measured one, run by run?

    Per drafting run and prompt: tokens generated minus the sum of the steps' expected emitted counts. Each step's
    emitted count minus its conditional expectation is a martingale difference and a prompt stops after at most
    max_new_tokens steps, so the sum has mean exactly 0 (optional stopping) when the expectation is exact. (The
    difference of the two block efficiencies divides that sum by the random number of target calls, which makes it
    slightly positive on average; hence the sums.) The t-test of each run rejects at 0.05 in about 5% of runs, and
    the mean over every prompt of every run is 0 within its SE; more rejections, or a pooled mean away from 0, says
    the expectation (or the verifier) is biased. Empty when no run records both.
    """
    drafted = runs[runs["budget"].notna() & np.isfinite(runs["expected_block_efficiency"].to_numpy(float))]
    rows, seen, pooled = [], set(), []
    for _, run in drafted.iterrows():
        mine = prompts[prompts["run_dir"] == run["run_dir"]]
        decoding = (*(run[k] for k in SETTING), run["method"], run["shape_tag"], run["seed"],
                    tuple(sorted(mine["prompt_id"])))
        if decoding in seen:  # the same shape, seed and prompts at two budget points (K3xL2 at L=2 and B=6)
            continue
        seen.add(decoding)
        d = ((mine["block_efficiency"] - mine["expected_block_efficiency"]) * mine["target_calls"]).to_numpy(float)
        d = d[np.isfinite(d)]
        pooled.append(d)
        se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else 0.0
        exact = len(d) > 0 and bool(np.allclose(d, 0, rtol=0, atol=1e-9))
        if se > 0:
            z = float(d.mean() / se)
            p = float(2 * sps.t.sf(abs(z), len(d) - 1))
        else:  # no spread: exact agreement, or the same nonzero difference on every prompt (a bias, flagged)
            z, p = (math.nan, math.nan) if exact or not len(d) else (math.copysign(math.inf, d.mean()), 0.0)
        point = "" if run["budget_value"] == run["shape_tag"] else f" at {run['budget_value']}"
        rows.append({**{k: run[k] for k in SETTING}, "run": f"{method_label(run['method'])} {run['shape_tag']}{point}"
                     f"{' (tuning)' if run['selection_role'] == 'tune' else ''}",
                     "n": len(d), "diff": float(d.mean()) if len(d) else math.nan, "se": se, "z": z, "p": p,
                     "exact": exact})
    if not rows:
        return ""
    table = pd.DataFrame(rows)
    tested = table[table["p"].notna()]
    k, rejected = len(tested), int((tested["p"] < ALPHA).sum())
    lines = ["# Measured vs expected block efficiency", "",
             "Per drafting run: per prompt, the tokens generated minus the sum over its steps of the exact expected "
             "emitted count (block efficiency times target calls, measured minus expected); its mean over prompts, "
             "SE, z = mean/SE and the t-test's p. The sum has mean exactly 0 when the expectation is right, so about "
             f"{ALPHA:.0%} of runs reject at {ALPHA:g} by chance and the pooled mean is 0 within its SE. A shape run "
             "with the same seed on the same prompts at two budget points (e.g. K3xL2 at L = 2 and at B = 6) decodes "
             "the same tokens and is counted once.", ""]
    if k:
        binom = sps.binomtest(rejected, k, ALPHA, alternative="greater").pvalue
        every = np.concatenate(pooled)
        se = float(every.std(ddof=1) / math.sqrt(len(every))) if len(every) > 1 else math.nan
        lines += [f"- {k} runs whose verification is random: p < {ALPHA:g} in {rejected} ({rejected / k:.1%}; "
                  f"{ALPHA * k:.1f} expected by chance, binomial p = {binom:.2f} for this many or more)."]
        if se > 0:
            z = float(every.mean() / se)
            lines.append(f"- All {len(every)} prompts of those runs pooled: measured − expected = {every.mean():+.3f} "
                         f"± {se:.3f} tokens per prompt (z = {z:+.2f}, two-sided t-test p = "
                         f"{2 * sps.t.sf(abs(z), len(every) - 1):.2f}). "
                         "A bias test with the power of every run; per-run z of runs with few prompts are skewed, "
                         "so their mean is not one.")
    exact = int(table["exact"].sum())
    if exact:
        lines.append(f"- {exact} runs where measured and expected agree on every prompt (deterministic verification: "
                     "greedy, or every node one-hot).")
    flagged = tested[tested["p"] < ALPHA].sort_values("p")
    if len(flagged):
        lines += ["", "Runs with p < 0.05:", "",
                  "| setting | run | prompts | measured − expected tokens per prompt | z | p |",
                  "|---|---|---:|---:|---:|---:|"]
        lines += [f"| {setting_title(dict(zip(SETTING, (r[k] for k in SETTING))))} | {r['run']} | {r['n']} | "
                  f"{r['diff']:+.3f} ± {r['se']:.3f} | {r['z']:+.2f} | {fmt_p(r['p'])} |"
                  for _, r in flagged.iterrows()]
    return "\n".join(lines) + "\n"
