"""One prompt's line of records.jsonl as a type, `Record`: its one constructor (`Record.build`, shared by the runner
and the tests' synthetic runs), `to_json` (the object written) and `from_json` (the validating reader).

`from_json` validates a stored object (the store reads every record through it) and raises a one-line RecordError
naming the file, the line, the key and what it must be; a constructed record is validated too, the engine's
invariants included.

Schema versions (`schema_version`, the object's last key; an object without it is version 1):
  1  every record written before versions were recorded (the committed studies' records). Required: prompt_id,
     prompt_tokens, new_token_ids, new_tokens, target_calls, draft_calls, tokens_verified, accepted_lengths, wall_s,
     time_draft_s, time_target_s, time_other_s. The keys the runner added one by one (text, block_efficiency,
     draft_length, score, ttft_s, decode_s, decode_tokens, decode_token_rate, expected_emitted, root_optimum,
     root_acceptance) are checked when present.
  2  adds schema_version and requires every key above. peak_gpu_memory_gb (CUDA runs) and
     prompt_tokens_before_truncation (prompts cut by dataset.max_prompt_tokens) are written where they apply.

Stored records are kept as read (the store returns the JSON objects, so a rewritten records file keeps every line's
bytes): `from_json(d).to_json() == d` for version 2, while a version-1 object comes back without the keys it lacked
(and without a later key it stored as null).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from rsd.harness.fields import (
    AMOUNT,
    COUNT,
    COUNTS,
    INTEGER,
    MAYBE_NUMBER,
    MAYBE_NUMBERS,
    NUMBERS,
    POSITIVE,
    SCHEMA_VERSION,
    TEXT,
    TOKEN_IDS,
    RecordError,
    declared_version,
    is_required,
    kind_problem,
    nearly_equal,
    null_problem,
    stored_key,
    stored_keys,
)


@dataclass(frozen=True, kw_only=True)
class Record:
    """One prompt's record: its tokens, text and score, the engine's counters per target call, and its timings."""

    prompt_id: str = stored_key(TEXT)
    prompt_tokens: int = stored_key(COUNT)
    new_token_ids: list[int] = stored_key(TOKEN_IDS)
    text: str | None = stored_key(TEXT, 2)
    new_tokens: int = stored_key(COUNT)
    target_calls: int = stored_key(POSITIVE)
    draft_calls: int = stored_key(COUNT)
    tokens_verified: list[int] = stored_key(COUNTS)
    accepted_lengths: list[int] = stored_key(COUNTS)
    block_efficiency: float | None = stored_key(AMOUNT, 2)
    wall_s: float = stored_key(AMOUNT)
    time_draft_s: float = stored_key(AMOUNT)
    time_target_s: float = stored_key(AMOUNT)
    time_other_s: float = stored_key(AMOUNT)
    draft_length: int | None = stored_key(COUNT, 2)
    score: float | None = stored_key(MAYBE_NUMBER, 2)
    ttft_s: float | None = stored_key(AMOUNT, 2)  # prefill + the first step
    decode_s: float | None = stored_key(AMOUNT, 2)  # the decode phase: after the first step
    decode_tokens: int | None = stored_key(COUNT, 2)  # tokens emitted after the first step
    decode_token_rate: float | None = stored_key(MAYBE_NUMBER, 2)
    peak_gpu_memory_gb: float | None = stored_key(AMOUNT, None)
    expected_emitted: list[float] | None = stored_key(NUMBERS, 2)  # per step, exact (docs/algorithms.md#expected-yield)
    root_optimum: list[float | None] | None = stored_key(MAYBE_NUMBERS, 2)  # per step (docs/algorithms.md#optimum)
    root_acceptance: list[float | None] | None = stored_key(MAYBE_NUMBERS, 2)
    prompt_tokens_before_truncation: int | None = stored_key(COUNT, None)
    schema_version: int = stored_key(INTEGER)

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
        problem = kind_problem(self) or self._invariant_problem()
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
        if rate is not None and not (self.decode_s > 0 and nearly_equal(rate, decode / self.decode_s)):
            return f"decode_token_rate={rate} is not decode_tokens / decode_s"
        return None

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> Record:
        """The record a stored JSON object holds; RecordError (FILE:LINE: corrupt record (key must be ...)) if it
        is not one of a version this rsd reads. Keys no version names are ignored."""
        if not isinstance(data, dict):
            raise RecordError("not a JSON object", where)
        version = declared_version(data, RecordError, where)
        keys = [f.name for f in fields(cls) if f.name != "schema_version"]
        missing = [f.name for f in fields(cls) if f.name in keys and is_required(f, version) and f.name not in data]
        if missing:
            raise RecordError(f"not a record (missing {', '.join(missing)})", where)
        null = null_problem(cls, data)
        if null:
            raise RecordError(null, where)
        try:
            return cls(**{key: data.get(key) for key in keys}, schema_version=version)
        except RecordError as err:
            raise RecordError(err.problem, where) from None

    def to_json(self) -> dict[str, Any]:
        """The JSON object written to records.jsonl (schema_version last, from version 2)."""
        version = {"schema_version": self.schema_version} if self.schema_version > 1 else {}
        return {**stored_keys(self), **version}


__all__ = ["Record"]
