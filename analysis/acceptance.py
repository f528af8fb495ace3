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


def acceptance_markdown(runs: Mapping[str, Iterable[Mapping[str, Any]]], positions: int = 4) -> str:
    """A table, one row per labelled run: mean acceptance length, then per position the token-weighted rate with
    the per-request rate in parentheses; the caption says which is which."""
    head = ["method", "drafts", "mean acc. length"] + [f"pos {k}" for k in range(1, positions + 1)]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    for label, records in runs.items():
        s = acceptance_summary(records, positions)
        cells = [f"{fmt(w)} ({fmt(p)})" for w, p in zip(s["rate_token_weighted"], s["rate_per_request"])]
        lines.append(f"| {label} | {s['num_drafts']} | {fmt(s['mean_acceptance_length'])} "
                     f"({fmt(s['mean_acceptance_length_per_request'])}) | " + " | ".join(cells) + " |")
    caption = ("Per-position acceptance = num_accepted_tokens_per_pos / num_drafts: the fraction of drafting steps "
               "accepting at least k drafted tokens, token-weighted over all steps (per-request mean over prompts in "
               "parentheses). Mean acceptance length = tokens per target call, pooled (per-request mean).")
    return "\n".join(lines) + "\n\n" + caption + "\n"
