"""A run's summary.json as a type, `Summary`: its one constructor (`Summary.build`, shared by the runner and the
tests' synthetic runs), `to_json` (the object written, its keys in the order written) and `from_json` (the reader).

`from_json` validates a stored object (the store reads every summary through it) and raises a one-line SummaryError
naming the file, the key and what it must be; a constructed summary is validated too.

Schema versions (`schema_version`, the object's last key; an object without it is version 1):
  1  required: complete (true), method, shape_tag, model_pair, dataset, sampling, seed, target_params, draft_params,
     prompt_ids, accuracy and every metric of METRICS except V1_OPTIONAL_METRICS (added later). shape, draft_length,
     tree_size, budget, budget_value, task, run_dir, config, records_sha256 and elapsed_s are checked when present.
  2  adds schema_version and requires every key above and every metric; elapsed_s (the process's seconds on the
     run) stays optional: a synthetic run has none.
Keys no version names (the fixed-compute selection's `selection`) are a summary's `extra`, kept in order.

Stored summaries are kept as read: `from_json(d).to_json() == d` for version 2, while a version-1 object comes back
without the keys it lacked (and without a later key it stored as null).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from rsd.core.metrics import summarize_records
from rsd.harness.fields import (
    AMOUNT,
    COUNT,
    INTEGER,
    MAYBE_NUMBER,
    MAYBE_TEXT,
    OBJECT,
    POSITIVE,
    PROMPT_IDS,
    SCHEMA_VERSION,
    TEXT,
    SummaryError,
    declared_version,
    is_required,
    kind_problem,
    null_problem,
    stored_key,
    stored_keys,
)

# The summary's run-level metrics, in the order metrics.summarize_records returns them (tests check the two agree)
METRICS = ("root_optimum", "root_acceptance", "fraction_of_optimum", "prompts", "new_tokens", "target_calls",
           "draft_calls", "block_efficiency", "expected_block_efficiency", "mbsu", "token_rate", "decode_token_rate",
           "wall_s", "time_draft_s", "time_target_s", "time_other_s", "mean_accepted_length", "acceptance_by_depth",
           "tokens_verified_per_call")
V1_OPTIONAL_METRICS = ("expected_block_efficiency", "decode_token_rate", "root_optimum", "root_acceptance",
                       "fraction_of_optimum")


@dataclass(frozen=True, kw_only=True)
class Summary:
    """A complete run's summary: what ran (method, shape, budget, pair, data, sampling, seed), its run-level
    `metrics` (metrics.summarize_records of its records, keys METRICS), accuracy, identity and records checksum."""

    method: str = stored_key(TEXT)
    shape: dict[str, Any] | None = stored_key(OBJECT, 2)
    shape_tag: str = stored_key(TEXT)
    draft_length: int | None = stored_key(COUNT, 2)
    tree_size: int | None = stored_key(COUNT, 2)
    budget: str | None = stored_key(MAYBE_TEXT, 2)
    budget_value: str | None = stored_key(TEXT, 2)
    model_pair: str = stored_key(TEXT)
    dataset: str = stored_key(TEXT)
    task: str | None = stored_key(MAYBE_TEXT, 2)  # None: a local dataset without one
    sampling: dict[str, Any] = stored_key(OBJECT)
    seed: int = stored_key(INTEGER)
    target_params: int = stored_key(POSITIVE)
    draft_params: int = stored_key(COUNT)
    metrics: dict[str, Any] = stored_key(OBJECT)  # written flattened, here
    accuracy: float | None = stored_key(MAYBE_NUMBER)
    run_dir: str | None = stored_key(TEXT, 2)
    config: dict[str, Any] | None = stored_key(OBJECT, 2)
    prompt_ids: list[str] = stored_key(PROMPT_IDS)
    records_sha256: str | None = stored_key(MAYBE_TEXT, 2)
    extra: dict[str, Any] = stored_key(OBJECT)  # written flattened, here
    elapsed_s: float | None = stored_key(AMOUNT, None)
    schema_version: int = stored_key(INTEGER)

    @classmethod
    def build(cls, *, method: str, shape: Mapping[str, Any], shape_tag: str, draft_length: int, tree_size: int,
              budget: str | None, budget_value: str, model_pair: str, dataset: str, task: str | None,
              sampling: Mapping[str, Any], seed: int, target_params: int, draft_params: int,
              records: Sequence[Mapping[str, Any]], accuracy: float | None, run_dir: str, config: Mapping[str, Any],
              records_sha256: str | None, extra: Mapping[str, Any] | None = None,
              elapsed_s: float | None = None) -> Summary:
        """The summary of a run whose `records` are in plan order: its metrics and prompt ids come from them."""
        return cls(method=method, shape=dict(shape), shape_tag=shape_tag, draft_length=draft_length,
                   tree_size=tree_size, budget=budget, budget_value=budget_value, model_pair=model_pair,
                   dataset=dataset, task=task, sampling=dict(sampling), seed=seed, target_params=target_params,
                   draft_params=draft_params, metrics=summarize_records(list(records), draft_params, target_params),
                   accuracy=accuracy, run_dir=run_dir, config=dict(config),
                   prompt_ids=[r["prompt_id"] for r in records], records_sha256=records_sha256,
                   extra=dict(extra or {}), elapsed_s=elapsed_s, schema_version=SCHEMA_VERSION)

    def __post_init__(self) -> None:
        problem = kind_problem(self)
        if problem:
            raise SummaryError(problem)

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> Summary:
        """The summary a stored JSON object holds; SummaryError (FILE:1: key must be ...) unless it is a complete
        run's summary of a version this rsd reads. Its metrics are not compared with the records here (see
        rsd.harness.store.summary_problem)."""
        if not isinstance(data, dict) or data.get("complete") is not True:
            raise SummaryError("not a complete run summary", where)
        version = declared_version(data, SummaryError, where)
        keys = [f.name for f in fields(cls) if f.name not in ("metrics", "extra", "schema_version")]
        for f in fields(cls):
            if f.name in keys and is_required(f, version) and f.name not in data:
                raise SummaryError(f"{f.name} must be {f.metadata['kind'].what}, got '(missing)'", where)
        missing = [k for k in METRICS if k not in data and (version > 1 or k not in V1_OPTIONAL_METRICS)]
        problem = f"{missing[0]} is missing" if missing else null_problem(cls, data)
        if problem:
            raise SummaryError(problem, where)
        named = {*keys, *METRICS, "complete", "schema_version"}
        try:
            return cls(**{key: data.get(key) for key in keys}, metrics={k: data[k] for k in METRICS if k in data},
                       extra={k: v for k, v in data.items() if k not in named}, schema_version=version)
        except SummaryError as err:
            raise SummaryError(err.problem, where) from None

    def to_json(self) -> dict[str, Any]:
        """The JSON object written to summary.json: `metrics` and `extra` flattened in their places, schema_version
        last (from version 2)."""
        out: dict[str, Any] = {"complete": True}
        for key, value in stored_keys(self).items():
            if key in ("metrics", "extra"):
                out.update(value)
            else:
                out[key] = value
        return {**out, **({"schema_version": self.schema_version} if self.schema_version > 1 else {})}


__all__ = ["METRICS", "V1_OPTIONAL_METRICS", "Summary"]
