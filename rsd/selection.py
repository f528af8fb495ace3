"""Honest shape selection at a fixed target compute (a tuning split disjoint from the evaluation prompts).

Picking the best of N shapes on the prompts one then reports is biased upwards (the winner's curse). With
`budget.select.prompts = n`, every shape meeting the budget first runs on `n` tuning prompts taken from the END of
the dataset, disjoint from the evaluation prompts (its first `dataset.num_prompts`); shapes are ranked by their
expected block efficiency on those prompts (the exact per-step expectation: less noise than the measured one), and
only the best `budget.select.top` shape(s) run on the evaluation prompts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from rsd.errors import ConfigError

T = TypeVar("T")


def selection_config(budget_cfg: Mapping[str, Any]) -> dict | None:
    """The validated `budget.select` block, or None when selection is off."""
    sel = budget_cfg.get("select")
    if not sel or not sel.get("prompts"):
        return None
    prompts, top = sel.get("prompts"), sel.get("top", 1)
    if not isinstance(prompts, int) or isinstance(prompts, bool) or prompts < 1:
        raise ConfigError(f"budget.select.prompts must be a positive integer (tuning prompts), got {prompts!r}")
    if not isinstance(top, int) or isinstance(top, bool) or top < 1:
        raise ConfigError(f"budget.select.top must be a positive integer (shapes kept per method), got {top!r}")
    return {"prompts": prompts, "top": top}


def split_tuning(examples: Sequence[T], num_eval: int | None, num_tune: int) -> tuple[list[T], list[T]]:
    """(evaluation, tuning): the first `num_eval` examples and the last `num_tune`, which must not overlap."""
    n_eval = len(examples) - num_tune if num_eval is None else num_eval
    if n_eval < 1 or n_eval + num_tune > len(examples):
        raise ConfigError(
            f"budget.select.prompts={num_tune} tuning prompts plus dataset.num_prompts={num_eval} evaluation prompts "
            f"need {n_eval + num_tune} distinct prompts, but the dataset has {len(examples)}: lower one of them")
    return list(examples[:n_eval]), list(examples[len(examples) - num_tune:])


def rank_shapes(summaries: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Tuning-run summaries, best first: by expected block efficiency (measured when a run has no expectation);
    ties go to the shape whose tag sorts first, so the choice never depends on the order runs were found in."""
    def key(s: Mapping[str, Any]) -> tuple[float, str]:
        value = s.get("expected_block_efficiency")
        return -float(s["block_efficiency"] if value is None else value), s["shape_tag"]

    return sorted(summaries, key=key)
