"""Per-position acceptance of a run, under the names vLLM and SGLang users know.

A drafting step is a step whose tree holds at least one drafted token (`tokens_verified > 0`; AR's and PLD's
matchless steps are not drafts). Position k is accepted at a step when the step accepts at least k drafted tokens.
- `num_accepted_tokens_per_pos[k] / num_drafts`: the fraction of drafting steps accepting position k (vLLM's
  per-position acceptance rate), token-weighted: pooled over every step of every prompt;
- per-request: the same fraction within each prompt, then the mean over prompts (each prompt weighs the same);
- conditional: accepted at k among steps accepted at k - 1 (pooled);
- mean acceptance length: tokens per target call (= block efficiency), pooled and per request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from analysis.columns import SETTING
from analysis.load import Tables
from analysis.names import method_label

POSITIONS = 5  # the longest fixed draft length of the studies


def drafted_steps(record: Mapping[str, Any]) -> list[int]:
    """The accepted lengths of a record's drafting steps."""
    return [a for a, n in zip(record["accepted_lengths"], record["tokens_verified"]) if n > 0]


def position_rates(accepted: Sequence[int], positions: int) -> list[float | None]:
    """For k = 1..positions, the fraction of `accepted` (one drafting step's accepted length each) that is >= k;
    None when there are no steps."""
    if not accepted:
        return [None] * positions
    return [sum(1 for a in accepted if a >= k) / len(accepted) for k in range(1, positions + 1)]


def acceptance_summary(records: Iterable[Mapping[str, Any]], positions: int = 4) -> dict[str, Any]:
    """One run's per-position acceptance (token-weighted and per request), conditional rates, drafts, and the mean
    acceptance length (pooled tokens / calls, and the mean over prompts of each prompt's ratio)."""
    records = list(records)
    pooled = [a for r in records for a in drafted_steps(r)]
    weighted = position_rates(pooled, positions)
    per_prompt = [position_rates(drafted_steps(r), positions) for r in records]
    per_request = []
    for k in range(positions):
        values = [rates[k] for rates in per_prompt if rates[k] is not None]
        per_request.append(sum(values) / len(values) if values else None)
    conditional = [weighted[0]] + [None if not weighted[k - 1] else weighted[k] / weighted[k - 1]
                                   for k in range(1, positions)] if pooled else [None] * positions
    calls = sum(r["target_calls"] for r in records)
    return {"num_drafts": len(pooled), "num_accepted_tokens_per_pos": [sum(1 for a in pooled if a >= k)
                                                                        for k in range(1, positions + 1)],
            "rate_token_weighted": weighted, "rate_per_request": per_request, "conditional": conditional,
            "mean_acceptance_length": sum(r["new_tokens"] for r in records) / calls if calls else None,
            "mean_acceptance_length_per_request": (sum(r["new_tokens"] / r["target_calls"] for r in records)
                                                   / len(records) if records else None)}


def acceptance_row(keys: Mapping[str, Any], records: Sequence[Mapping[str, Any]], depth: int) -> dict[str, Any]:
    """`keys` plus one run's drafts, mean acceptance length and, per position 1..POSITIONS, its token-weighted,
    per-request and conditional rate (None past the tree's `depth`: a position never drafted has no rate, not 0)."""
    summary = acceptance_summary(records, POSITIONS)
    row = {**keys, "num_drafts": summary["num_drafts"], "mean_acceptance_length": summary["mean_acceptance_length"],
           "mean_acceptance_length_per_request": summary["mean_acceptance_length_per_request"]}
    for k in range(POSITIONS):
        for kind, key in (("token_weighted", "rate_token_weighted"), ("per_request", "rate_per_request"),
                          ("conditional", "conditional")):
            row[f"pos{k + 1}_{kind}"] = summary[key][k] if k < depth else None
    return row


def acceptance_frame(tables: Tables) -> pd.DataFrame:
    """One acceptance_row per evaluated drafting run, from a report's step and prompt tables."""
    rows = []
    prompts = tables.prompts.set_index(["run_dir", "prompt_id"])
    for run_dir, steps in tables.steps.groupby("run_dir", sort=True):
        run = tables.runs[tables.runs["run_dir"] == run_dir].iloc[0]
        if run["method"] == "ar" or run["selection_role"] == "tune":
            continue
        records = [{"accepted_lengths": s["accepted_length"].tolist(), "tokens_verified": s["tokens_verified"].tolist(),
                    "target_calls": len(s), "new_tokens": int(prompts.loc[(run_dir, pid), "new_tokens"])}
                   for pid, s in steps.groupby("prompt_id", sort=True)]
        keys = {k: run[k] for k in (*SETTING, "seed", "budget", "x", "method", "shape_tag")}
        rows.append(acceptance_row(keys, records, int(run["draft_length"])))
    return pd.DataFrame(rows)


def fmt(value: object) -> str:
    return "–" if value is None or value == "" or pd.isna(value) else f"{float(value):.3f}"


def acceptance_markdown(frame: pd.DataFrame) -> str:
    """Per dataset, temperature and budget kind: a row per method and point with its acceptance by position."""
    if frame.empty:
        return "No drafting runs yet.\n"
    out = []
    for (dataset, temperature, budget), group in frame.groupby(["dataset", "temperature", "budget"], sort=True):
        head = ["method", "point", "drafts", "mean acc. length"] + [f"pos {k}" for k in range(1, POSITIONS + 1)]
        lines = [f"**{dataset}, T = {temperature}, {budget}**", "", "| " + " | ".join(head) + " |",
                 "|---|---|" + "---:|" * (len(head) - 2)]
        for _, r in group.sort_values(["x", "method", "shape_tag"], kind="stable").iterrows():
            cells = [f"{fmt(r[f'pos{k}_token_weighted'])} ({fmt(r[f'pos{k}_per_request'])})"
                     for k in range(1, POSITIONS + 1)]
            lines.append(f"| {method_label(r['method'])} | {r['shape_tag']} | {int(r['num_drafts'])} | "
                         f"{fmt(r['mean_acceptance_length'])} ({fmt(r['mean_acceptance_length_per_request'])}) | "
                         + " | ".join(cells) + " |")
        out.append("\n".join(lines))
    caption = ("Per-position acceptance = num_accepted_tokens_per_pos / num_drafts: the fraction of drafting steps "
               "that accept at least k drafted tokens, token-weighted over every step of every prompt, with the "
               "per-request mean over prompts in parentheses (– past the tree's depth). Mean acceptance length = "
               "tokens per target call (block efficiency), pooled over prompts (per-request mean in parentheses). "
               "The conditional rates (accepted at k among steps accepted at k − 1) are in acceptance.csv.")
    return "\n\n".join(out) + "\n\n" + caption + "\n"
