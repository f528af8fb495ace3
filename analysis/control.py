"""The draft as a control: each method with the feature head against the same method with draft v3, on the same
prompts (the study's control stage), paired prompt by prompt; and each tree method's gain over SD with either draft.

For every dataset, temperature, budget point and method that ran with both drafts: the feature head's level minus
v3's (per-prompt differences, 95% t interval, Holm over the table), and the method's gain over SD under each draft
(mean over the shared prompts). A gain that is larger with the head comes from the draft, not the method. Methods
that use no draft model (AR, PLD: 0 draft parameters) decode the same tokens under either pair and are left out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.answers import signed
from analysis.names import method_label
from analysis.stats import holm, paired, prompt_values
from analysis.tables import best_shapes

POINT = ("dataset", "temperature", "budget", "x")


def _levels(best: pd.DataFrame, prompts: pd.DataFrame, metric: str) -> dict[tuple, pd.Series]:
    """(point..., method) -> per-prompt values of the method's best shape there (seeds averaged)."""
    out = {}
    for _, row in best[best["budget"].notna()].iterrows():
        key = (*(row[k] for k in POINT), row["method"])
        out[key] = prompt_values(prompts, row["run_dirs"], metric).groupby(level=[0, 1]).mean()
    return out


def control_rows(head: tuple[pd.DataFrame, pd.DataFrame], v3: tuple[pd.DataFrame, pd.DataFrame],
                 metric: str = "expected_block_efficiency") -> pd.DataFrame:
    """One row per point and method run with both drafts: head - v3 with CI and Holm p, and the gain over SD under
    each draft. `head` and `v3` are (runs, prompts) tables of a report (analysis.load)."""
    (head_runs, head_prompts), (v3_runs, v3_prompts) = head, v3
    drafted = set(head_runs.loc[head_runs["draft_params"] > 0, "method"])
    a = _levels(best_shapes(head_runs, head_prompts, errors=False), head_prompts, metric)
    b = _levels(best_shapes(v3_runs, v3_prompts, errors=False), v3_prompts, metric)
    rows = []
    for key in sorted((k for k in set(a) & set(b) if k[-1] in drafted), key=str):
        common = a[key].index.intersection(b[key].index)
        diff = paired(a[key].loc[common].to_numpy(float), b[key].loc[common].to_numpy(float))
        sd = (*key[:-1], "sd")
        gains = [float((lv[key] - lv[sd]).loc[common].mean()) if sd in lv and key[-1] != "sd" else np.nan
                 for lv in (a, b)]
        rows.append({**dict(zip(POINT, key[:-1])), "method": key[-1], "metric": metric, "n": diff.n,
                     "head": float(a[key].loc[common].mean()), "v3": float(b[key].loc[common].mean()),
                     "diff": diff.mean, "low": diff.low, "high": diff.high, "p": diff.p,
                     "gain_over_sd_head": gains[0], "gain_over_sd_v3": gains[1]})
    frame = pd.DataFrame(rows)
    if len(frame):
        frame["p_holm"] = holm(frame["p"])
    return frame


def control_sentence(frame: pd.DataFrame, alpha: float = 0.05) -> str:
    """Per dataset and temperature: for how many methods the head's level is significantly higher or lower than
    v3's after Holm, and the mean gain over SD of the other methods with each draft."""
    parts = []
    for (dataset, temperature), group in frame.groupby(["dataset", "temperature"], sort=True):
        higher = int(((group["p_holm"] < alpha) & (group["diff"] > 0)).sum())
        lower = int(((group["p_holm"] < alpha) & (group["diff"] < 0)).sum())
        others = group.dropna(subset=["gain_over_sd_head", "gain_over_sd_v3"])
        gains = (f"; the other methods' mean gain over SD is {signed(others['gain_over_sd_head'].mean())} with the "
                 f"head and {signed(others['gain_over_sd_v3'].mean())} with v3" if len(others) else "")
        parts.append(f"{dataset} at T = {temperature:g}: of {len(group)} cells (method and point), the head is higher "
                     f"in {higher}, lower in {lower}, not different after Holm in {len(group) - higher - lower} "
                     f"(median difference {signed(group['diff'].median())}){gains}")
    return "; ".join(parts) + "."


def control_markdown(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "The control pass (draft v3 on the same prompts, the study's control stage) has not run yet.\n"
    lines = ["| set | T | point | method | head | v3 | head − v3 (95% CI) | Holm p | gain over SD: head | v3 |",
             "|---|---|---|---|---:|---:|---|---:|---:|---:|"]
    for _, r in frame.iterrows():
        point = f"{'L' if r['budget'] == 'fixed_length' else 'B'} = {int(r['x'])}"
        gains = ["–" if pd.isna(r[k]) else signed(r[k]) for k in ("gain_over_sd_head", "gain_over_sd_v3")]
        lines.append(f"| {r['dataset']} | {r['temperature']} | {point} | {method_label(r['method'])} | "
                     f"{r['head']:.3f} | {r['v3']:.3f} | {signed(r['diff'])} ({signed(r['low'])}, "
                     f"{signed(r['high'])}) | {r['p_holm']:.3f} | {gains[0]} | {gains[1]} |")
    return control_sentence(frame) + "\n\n" + "\n".join(lines) + "\n\n" + (
        f"{frame['metric'].iloc[0]} per method with each draft on the same prompts (n per row); gains over SD are "
        "means over the same prompts, with each draft (analysis/control.py).\n")
