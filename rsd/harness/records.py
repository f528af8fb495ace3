"""The two files a run writes, as types: `Record`, one prompt's line of records.jsonl, and `Summary`, the run's
summary.json. Each has one constructor (`Record.build`, `Summary.build`) that the runner (execute) and the tests'
synthetic runs (tests/helpers/runs.py) share, `to_json` (the object written, its keys in the order written) and
`from_json`, which validates a stored object (the store reads every record and summary through it) and raises a
one-line SchemaError naming the file, the key and what it must be. A constructed object is validated too.

Schema versions (`schema_version`, each object's last key; an object without it is version 1):

Record
  1  every record written before versions were recorded (the committed studies' records). Required: prompt_id,
     prompt_tokens, new_token_ids, new_tokens, target_calls, draft_calls, tokens_verified, accepted_lengths, wall_s,
     time_draft_s, time_target_s, time_other_s. The keys the runner added one by one (text, block_efficiency,
     draft_length, score, ttft_s, decode_s, decode_tokens, decode_token_rate, expected_emitted, root_optimum,
     root_acceptance) are checked when present.
  2  adds schema_version and requires every key above. peak_gpu_memory_gb (CUDA runs) and
     prompt_tokens_before_truncation (prompts cut by dataset.max_prompt_tokens) are written where they apply.

Summary
  1  required: complete (true), method, shape_tag, model_pair, dataset, sampling, seed, target_params, draft_params,
     prompt_ids, accuracy and every metric of METRICS except V1_OPTIONAL_METRICS (added later). shape, draft_length,
     tree_size, budget, budget_value, task, run_dir, config, records_sha256 and elapsed_s are checked when present.
  2  adds schema_version and requires every key above and every metric; elapsed_s (the process's seconds on the
     run) stays optional: a synthetic run has none.
Keys no version names (the fixed-compute selection's `selection`) are a summary's `extra`, kept in order.

Stored objects are kept as read (the store returns the JSON objects, so a rewritten records file keeps every line's
bytes): `from_json(d).to_json() == d` for version 2, while a version-1 object comes back without the keys it lacked
(and without a later key it stored as null).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

from rsd.core.metrics import summarize_records
from rsd.errors import RsdError
from rsd.harness.kinds import is_int, is_number

SCHEMA_VERSION = 2  # what this version writes; it reads 1 (no schema_version) and 2
VERSIONS = (1, 2)

# The summary's run-level metrics, in the order metrics.summarize_records returns them (tests check the two agree)
METRICS = ("root_optimum", "root_acceptance", "fraction_of_optimum", "prompts", "new_tokens", "target_calls",
           "draft_calls", "block_efficiency", "expected_block_efficiency", "mbsu", "token_rate", "decode_token_rate",
           "wall_s", "time_draft_s", "time_target_s", "time_other_s", "mean_accepted_length", "acceptance_by_depth",
           "tokens_verified_per_call")
V1_OPTIONAL_METRICS = ("expected_block_efficiency", "decode_token_rate", "root_optimum", "root_acceptance",
                       "fraction_of_optimum")


class SchemaError(RsdError, ValueError):
    """A record or summary that breaks its schema: `problem` says which key and what it must be, `where` the file."""

    template = "{where}: {problem}"

    def __init__(self, problem: str, where: str = "") -> None:
        self.problem, self.where = problem, where
        super().__init__(self.template.format(where=where, problem=problem) if where else problem)


class RecordError(SchemaError):
    """A records.jsonl line that is not a valid record (`where` is FILE:LINE)."""

    template = "{where}: corrupt record ({problem})"


class SummaryError(SchemaError):
    """A summary.json that is not a complete run's summary (`where` is FILE:1)."""


# --------------------------------------------------------------------------------------------------------- kinds
class Kind(NamedTuple):
    """What a stored value must be: its check and how an error names it."""

    ok: Callable[[Any], bool]
    what: str


TEXT = Kind(lambda v: isinstance(v, str), "a string")
MAYBE_TEXT = Kind(lambda v: v is None or isinstance(v, str), "a string or null")
INTEGER = Kind(is_int, "an integer")
COUNT = Kind(lambda v: is_int(v, 0), "an integer >= 0")
POSITIVE = Kind(lambda v: is_int(v, 1), "an integer >= 1")
AMOUNT = Kind(lambda v: is_number(v) and v >= 0, "a number >= 0")
MAYBE_NUMBER = Kind(lambda v: v is None or is_number(v), "a number or null")
TOKEN_IDS = Kind(lambda v: isinstance(v, list) and all(is_int(t, 0) for t in v), "a list of token ids")
COUNTS = Kind(lambda v: isinstance(v, list) and all(is_int(t, 0) for t in v), "a list of integers >= 0")
NUMBERS = Kind(lambda v: isinstance(v, list) and all(is_number(x) for x in v), "a list of numbers")
MAYBE_NUMBERS = Kind(lambda v: isinstance(v, list) and all(x is None or is_number(x) for x in v),
                     "a list of numbers or nulls")
OBJECT = Kind(lambda v: isinstance(v, dict), "an object")
PROMPT_IDS = Kind(lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v), "a list of prompt ids")


def _key(kind: Kind, since: int | None = 1) -> Any:
    """A stored key of kind `kind`, required from schema version `since` on (None: never required)."""
    return field(metadata={"kind": kind, "since": since})


def _required(f: Any, version: int) -> bool:
    return f.metadata["since"] is not None and f.metadata["since"] <= version


def _version(data: Mapping[str, Any], error: type[SchemaError], where: str) -> int:
    """The schema version a stored object declares (1 without schema_version)."""
    if "schema_version" not in data:
        return 1
    version = data["schema_version"]
    if not (is_int(version) and version in VERSIONS):
        raise error(f"schema_version must be one of {', '.join(map(str, VERSIONS))} (this rsd reads versions up to "
                    f"{SCHEMA_VERSION}), got {version!r:.60}", where)
    return version


def _null_problem(cls: type, data: Mapping[str, Any]) -> str | None:
    """A key stored as null where its kind needs a value (an object's own checks read None as "not recorded")."""
    for f in fields(cls):
        if data.get(f.name, 0) is None and not f.metadata["kind"].ok(None):
            return f"{f.name} must be {f.metadata['kind'].what}, got None"
    return None


def _kind_problem(obj: Any) -> str | None:
    """The first stored key of `obj` whose value is not of its kind (a key its version does not require may be None)."""
    if not (is_int(obj.schema_version) and obj.schema_version in VERSIONS):
        return f"schema_version must be one of {', '.join(map(str, VERSIONS))}, got {obj.schema_version!r:.60}"
    for f in fields(obj):
        value = getattr(obj, f.name)
        if (value is not None or _required(f, obj.schema_version)) and not f.metadata["kind"].ok(value):
            return f"{f.name} must be {f.metadata['kind'].what}, got {value!r:.60}"
    return None


def _stored(obj: Any) -> dict[str, Any]:
    """The keys of `obj` as written: in field order, without a key its version does not require whose value is None."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)
            if f.name != "schema_version" and (getattr(obj, f.name) is not None or _required(f, obj.schema_version))}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


# -------------------------------------------------------------------------------------------------------- record
@dataclass(frozen=True, kw_only=True)
class Record:
    """One prompt's record: its tokens, text and score, the engine's counters per target call, and its timings."""

    prompt_id: str = _key(TEXT)
    prompt_tokens: int = _key(COUNT)
    new_token_ids: list[int] = _key(TOKEN_IDS)
    text: str | None = _key(TEXT, 2)
    new_tokens: int = _key(COUNT)
    target_calls: int = _key(POSITIVE)
    draft_calls: int = _key(COUNT)
    tokens_verified: list[int] = _key(COUNTS)
    accepted_lengths: list[int] = _key(COUNTS)
    block_efficiency: float | None = _key(AMOUNT, 2)
    wall_s: float = _key(AMOUNT)
    time_draft_s: float = _key(AMOUNT)
    time_target_s: float = _key(AMOUNT)
    time_other_s: float = _key(AMOUNT)
    draft_length: int | None = _key(COUNT, 2)
    score: float | None = _key(MAYBE_NUMBER, 2)
    ttft_s: float | None = _key(AMOUNT, 2)  # prefill + the first step
    decode_s: float | None = _key(AMOUNT, 2)  # the decode phase: after the first step
    decode_tokens: int | None = _key(COUNT, 2)  # tokens emitted after the first step
    decode_token_rate: float | None = _key(MAYBE_NUMBER, 2)
    peak_gpu_memory_gb: float | None = _key(AMOUNT, None)
    expected_emitted: list[float] | None = _key(NUMBERS, 2)  # per step, exact (docs/algorithms.md#expected-yield)
    root_optimum: list[float | None] | None = _key(MAYBE_NUMBERS, 2)  # per step (docs/algorithms.md#optimum)
    root_acceptance: list[float | None] | None = _key(MAYBE_NUMBERS, 2)
    prompt_tokens_before_truncation: int | None = _key(COUNT, None)
    schema_version: int = _key(INTEGER)

    @classmethod
    def build(cls, *, prompt_id: str, prompt_tokens: int, new_token_ids: list[int], text: str, target_calls: int,
              draft_calls: int, tokens_verified: list[int], accepted_lengths: list[int], wall_s: float,
              time_draft_s: float, time_target_s: float, time_other_s: float, draft_length: int,
              score: float | None, ttft_s: float | None = None, decode_s: float | None = None,
              decode_tokens: int | None = None, peak_gpu_memory_gb: float | None = None,
              expected_emitted: list[float] | None = None, root_optimum: list[float | None] | None = None,
              root_acceptance: list[float | None] | None = None,
              prompt_tokens_before_truncation: int | None = None, schema_version: int = SCHEMA_VERSION) -> Record:
        """A record, with new_tokens, block_efficiency and decode_token_rate derived (the rate is None without decode
        time). Version 2 needs every timing and per-step list; `schema_version=1` builds the older layout."""
        timed = decode_tokens is not None and decode_s is not None and decode_s > 0
        rate = decode_tokens / decode_s if timed else None
        return cls(prompt_id=prompt_id, prompt_tokens=prompt_tokens, new_token_ids=new_token_ids, text=text,
                   new_tokens=len(new_token_ids), target_calls=target_calls, draft_calls=draft_calls,
                   tokens_verified=tokens_verified, accepted_lengths=accepted_lengths,
                   block_efficiency=len(new_token_ids) / target_calls, wall_s=wall_s, time_draft_s=time_draft_s,
                   time_target_s=time_target_s, time_other_s=time_other_s, draft_length=draft_length, score=score,
                   ttft_s=ttft_s, decode_s=decode_s, decode_tokens=decode_tokens, decode_token_rate=rate,
                   peak_gpu_memory_gb=peak_gpu_memory_gb, expected_emitted=expected_emitted,
                   root_optimum=root_optimum, root_acceptance=root_acceptance,
                   prompt_tokens_before_truncation=prompt_tokens_before_truncation, schema_version=schema_version)

    def __post_init__(self) -> None:
        problem = _kind_problem(self) or self._invariant_problem()
        if problem:
            raise RecordError(problem)

    def _invariant_problem(self) -> str | None:
        """Why the record breaks the engine's invariants, or None. Each step emits its accepted path plus one token,
        except that the last step may stop early (EOS or max_new_tokens) after at least one; the decode phase is
        everything after the first step."""
        calls, steps, tokens = self.target_calls, self.accepted_lengths, self.new_tokens
        if tokens != len(self.new_token_ids):
            return f"new_tokens={tokens} but new_token_ids holds {len(self.new_token_ids)} tokens"
        for key in ("accepted_lengths", "tokens_verified", "expected_emitted"):
            per_call = getattr(self, key)
            if per_call is not None and len(per_call) != calls:
                return f"{key} has {len(per_call)} entries for target_calls={calls} (one per target call)"
        if any(a > v for a, v in zip(steps, self.tokens_verified)):
            return "an accepted length exceeds the tokens verified in its step"
        full = sum(steps) + calls  # every step emitting its accepted path plus one
        if not full - steps[-1] <= tokens <= full:
            return (f"new_tokens={tokens} disagrees with the steps (accepted lengths {sum(steps)} over {calls} target "
                    f"calls emit between {full - steps[-1]} and {full} tokens)")
        if self.decode_tokens is None:
            return None
        if self.decode_s is None:
            return "decode_tokens without decode_s"
        decode = tokens - (steps[0] + 1) if calls > 1 else 0
        if self.decode_tokens != decode:
            return f"decode_tokens={self.decode_tokens} but the steps after the first emit {decode} tokens"
        rate = self.decode_token_rate
        if rate is not None and not (self.decode_s > 0 and _close(rate, decode / self.decode_s)):
            return f"decode_token_rate={rate} is not decode_tokens / decode_s"
        return None

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> Record:
        """The record a stored JSON object holds; RecordError (FILE:LINE: corrupt record (key must be ...)) if it
        is not one of a version this rsd reads. Keys no version names are ignored."""
        if not isinstance(data, dict):
            raise RecordError("not a JSON object", where)
        version = _version(data, RecordError, where)
        keys = [f.name for f in fields(cls) if f.name != "schema_version"]
        missing = [f.name for f in fields(cls) if f.name in keys and _required(f, version) and f.name not in data]
        if missing:
            raise RecordError(f"not a record (missing {', '.join(missing)})", where)
        null = _null_problem(cls, data)
        if null:
            raise RecordError(null, where)
        try:
            return cls(**{key: data.get(key) for key in keys}, schema_version=version)
        except RecordError as err:
            raise RecordError(err.problem, where) from None

    def to_json(self) -> dict[str, Any]:
        """The JSON object written to records.jsonl (schema_version last, from version 2)."""
        version = {"schema_version": self.schema_version} if self.schema_version > 1 else {}
        return {**_stored(self), **version}


# ------------------------------------------------------------------------------------------------------- summary
@dataclass(frozen=True, kw_only=True)
class Summary:
    """A complete run's summary: what ran (method, shape, budget, pair, data, sampling, seed), its run-level
    `metrics` (metrics.summarize_records of its records, keys METRICS), accuracy, identity and records checksum."""

    method: str = _key(TEXT)
    shape: dict[str, Any] | None = _key(OBJECT, 2)
    shape_tag: str = _key(TEXT)
    draft_length: int | None = _key(COUNT, 2)
    tree_size: int | None = _key(COUNT, 2)
    budget: str | None = _key(MAYBE_TEXT, 2)
    budget_value: str | None = _key(TEXT, 2)
    model_pair: str = _key(TEXT)
    dataset: str = _key(TEXT)
    task: str | None = _key(MAYBE_TEXT, 2)  # None: a local dataset without one
    sampling: dict[str, Any] = _key(OBJECT)
    seed: int = _key(INTEGER)
    target_params: int = _key(POSITIVE)
    draft_params: int = _key(COUNT)
    metrics: dict[str, Any] = _key(OBJECT)  # written flattened, here
    accuracy: float | None = _key(MAYBE_NUMBER)
    run_dir: str | None = _key(TEXT, 2)
    config: dict[str, Any] | None = _key(OBJECT, 2)
    prompt_ids: list[str] = _key(PROMPT_IDS)
    records_sha256: str | None = _key(MAYBE_TEXT, 2)
    extra: dict[str, Any] = _key(OBJECT)  # written flattened, here
    elapsed_s: float | None = _key(AMOUNT, None)
    schema_version: int = _key(INTEGER)

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
        problem = _kind_problem(self)
        if problem:
            raise SummaryError(problem)

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> Summary:
        """The summary a stored JSON object holds; SummaryError (FILE:1: key must be ...) unless it is a complete
        run's summary of a version this rsd reads. Its metrics are not compared with the records here (see
        rsd.harness.store.summary_problem)."""
        if not isinstance(data, dict) or data.get("complete") is not True:
            raise SummaryError("not a complete run summary", where)
        version = _version(data, SummaryError, where)
        keys = [f.name for f in fields(cls) if f.name not in ("metrics", "extra", "schema_version")]
        for f in fields(cls):
            if f.name in keys and _required(f, version) and f.name not in data:
                raise SummaryError(f"{f.name} must be {f.metadata['kind'].what}, got '(missing)'", where)
        missing = [k for k in METRICS if k not in data and (version > 1 or k not in V1_OPTIONAL_METRICS)]
        problem = f"{missing[0]} is missing" if missing else _null_problem(cls, data)
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
        for key, value in _stored(self).items():
            if key in ("metrics", "extra"):
                out.update(value)
            else:
                out[key] = value
        return {**out, **({"schema_version": self.schema_version} if self.schema_version > 1 else {})}


__all__ = ["METRICS", "SCHEMA_VERSION", "V1_OPTIONAL_METRICS", "VERSIONS", "Record", "RecordError", "SchemaError",
           "Summary", "SummaryError"]
