"""Honest shape selection at a fixed target compute (a tuning split disjoint from the evaluation prompts).

Picking the best of N shapes on the prompts one then reports is biased upwards (the winner's curse). With
`budget.select.prompts = n`, every shape meeting the budget first runs on `n` tuning prompts taken from the END of
the dataset, disjoint from the evaluation prompts (its first `dataset.num_prompts`); shapes are ranked by their
expected block efficiency on those prompts (the exact per-step expectation: less noise than the measured one), and
only the best `budget.select.top` shape(s) run on the evaluation prompts. `budget.select.offset` takes the tuning
prompts from that index instead of the end (a preset keeps its prompts when a dataset grows), and
`budget.select.new_tokens` decodes fewer new tokens per tuning prompt (a cheaper ranking of many shapes).

`budget.select.by` names the ranking value: `prompt_mean` (the default) is the mean over the tuning prompts of each
prompt's expected tokens / its target calls, the definition every report table and paired comparison uses;
`ratio_of_sums` is the run's total expected tokens / total target calls, the criterion of the committed studies
(their presets pin it, so they reproduce). The criterion chooses runs and changes none: it is not in any identity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from rsd.errors import ConfigError

T = TypeVar("T")
RANKINGS = ("prompt_mean", "ratio_of_sums")  # budget.select.by
SELECTED_BY = {"prompt_mean": "expected block efficiency, mean over the tuning prompts of per-prompt values",
               "ratio_of_sums": "expected block efficiency, run-level ratio of sums over the tuning prompts"}


def split_tuning(examples: Sequence[T], num_eval: int | None, num_tune: int, offset: int | None = None
                 ) -> tuple[list[T], list[T]]:
    """(evaluation, tuning): the first `num_eval` examples (default: all before the tuning ones) and `num_tune` from
    index `offset` (default: the last `num_tune`); the two must not overlap."""
    if offset is None:
        n_eval = len(examples) - num_tune if num_eval is None else num_eval
        if n_eval < 1 or n_eval + num_tune > len(examples):
            raise ConfigError(
                f"budget.select.prompts={num_tune} tuning prompts plus dataset.num_prompts={num_eval} evaluation "
                f"prompts need {n_eval + num_tune} distinct prompts, but the dataset has {len(examples)}: lower one "
                "of them")
        return list(examples[:n_eval]), list(examples[len(examples) - num_tune:])
    n_eval = offset if num_eval is None else num_eval
    if n_eval < 1 or n_eval > offset or offset + num_tune > len(examples):
        raise ConfigError(
            f"budget.select.offset={offset} with prompts={num_tune} takes tuning prompts "
            f"{offset}..{offset + num_tune - 1} (0-based) of a dataset of {len(examples)}, after "
            f"dataset.num_prompts={num_eval} evaluation prompts: they must fit in the dataset and start at or after "
            "the last evaluation prompt")
    return list(examples[:n_eval]), list(examples[offset:offset + num_tune])


def prompt_mean_score(records: Sequence[Mapping[str, Any]]) -> float:
    """The `prompt_mean` ranking value of one tuning run: the mean over its records of sum(expected_emitted) /
    target_calls (new_tokens / target_calls for a record without expectations)."""
    values = [sum(r["expected_emitted"] if r.get("expected_emitted") is not None else [r["new_tokens"]])
              / r["target_calls"] for r in records]
    return sum(values) / len(values)


def rank_shapes(summaries: Sequence[Mapping[str, Any]], scores: Mapping[str, float] | None = None
                ) -> list[Mapping[str, Any]]:
    """Tuning-run summaries, best first: by `scores[shape_tag]` when given (prompt_mean_score), else by the summary's
    run-level expected block efficiency (measured when a run has no expectation); ties go to the shape whose tag
    sorts first, so the choice never depends on the order runs were found in."""
    def key(s: Mapping[str, Any]) -> tuple[float, str]:
        value = s.get("expected_block_efficiency") if scores is None else scores[s["shape_tag"]]
        return -float(s["block_efficiency"] if value is None else value), s["shape_tag"]

    return sorted(summaries, key=key)
