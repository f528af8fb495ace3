"""What a stored key of a record or summary must be: schema versions, value kinds, the version each key is required
from, and the one-line SchemaError family that names the file, the key and what it must be.

A key is a dataclass field declared with `stored_key(kind, since)`. A version-1 object (no schema_version) is
checked for the keys it has; from the version a key is required in, it must be present and of its kind.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import field, fields
from typing import Any, NamedTuple

from rsd.errors import RsdError
from rsd.harness.kinds import is_int, is_number

SCHEMA_VERSION = 2  # what this version writes; it reads 1 (no schema_version) and 2
VERSIONS = (1, 2)


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


def stored_key(kind: Kind, since: int | None = 1) -> Any:
    """A stored key of kind `kind`, required from schema version `since` on (None: never required)."""
    return field(metadata={"kind": kind, "since": since})


def is_required(f: Any, version: int) -> bool:
    """Whether the stored key `f` (a dataclass field of `stored_key`) is required at schema version `version`."""
    return f.metadata["since"] is not None and f.metadata["since"] <= version


def declared_version(data: Mapping[str, Any], error: type[SchemaError], where: str) -> int:
    """The schema version a stored object declares (1 without schema_version)."""
    if "schema_version" not in data:
        return 1
    version = data["schema_version"]
    if not (is_int(version) and version in VERSIONS):
        raise error(f"schema_version must be one of {', '.join(map(str, VERSIONS))} (this rsd reads versions up to "
                    f"{SCHEMA_VERSION}), got {version!r:.60}", where)
    return version


def null_problem(cls: type, data: Mapping[str, Any]) -> str | None:
    """A key stored as null where its kind needs a value (an object's own checks read None as "not recorded")."""
    for f in fields(cls):
        if data.get(f.name, 0) is None and not f.metadata["kind"].ok(None):
            return f"{f.name} must be {f.metadata['kind'].what}, got None"
    return None


def kind_problem(obj: Any) -> str | None:
    """The first stored key of `obj` whose value is not of its kind (a key its version does not require may be None)."""
    if not (is_int(obj.schema_version) and obj.schema_version in VERSIONS):
        return f"schema_version must be one of {', '.join(map(str, VERSIONS))}, got {obj.schema_version!r:.60}"
    for f in fields(obj):
        value = getattr(obj, f.name)
        if (value is not None or is_required(f, obj.schema_version)) and not f.metadata["kind"].ok(value):
            return f"{f.name} must be {f.metadata['kind'].what}, got {value!r:.60}"
    return None


def stored_keys(obj: Any) -> dict[str, Any]:
    """The keys of `obj` as written: in field order, without a key its version does not require whose value is None."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)
            if f.name != "schema_version" and (getattr(obj, f.name) is not None or is_required(f, obj.schema_version))}


def nearly_equal(a: float, b: float) -> bool:
    """Two stored floats that are equal up to rounding (a derived value against its recomputation)."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


__all__ = ["AMOUNT", "COUNT", "COUNTS", "INTEGER", "MAYBE_NUMBER", "MAYBE_NUMBERS", "MAYBE_TEXT", "NUMBERS", "OBJECT",
           "POSITIVE", "PROMPT_IDS", "SCHEMA_VERSION", "TEXT", "TOKEN_IDS", "VERSIONS", "Kind", "RecordError",
           "SchemaError", "SummaryError", "declared_version", "is_required", "kind_problem", "nearly_equal",
           "null_problem", "stored_key", "stored_keys"]
