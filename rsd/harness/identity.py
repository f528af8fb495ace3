"""A run's identity and its directory's name: the digests that name a run (its examples, its models' files, its
resolved identity) and the sanitising that keeps every name component inside out_dir."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rsd.errors import ConfigError
from rsd.harness.schema import ModelPairConfig

_COMPONENT_MAX = 80


def safe_component(value: Any) -> str:
    """`value` as one harmless path component: only [A-Za-z0-9._+=-], no leading dot, not empty, at most 80 chars.

    Anything else (`/`, `..`, spaces, NUL) becomes `_`; an over-long value keeps its start plus a hash of the whole.
    """
    text = re.sub(r"[^A-Za-z0-9._+=-]", "_", str(value))
    text = re.sub(r"^\.+", lambda m: "_" * len(m.group()), text) or "_"
    if len(text) > _COMPONENT_MAX:
        text = text[: _COMPONENT_MAX - 9] + "-" + hashlib.sha256(str(value).encode()).hexdigest()[:8]
    return text


def join_inside(root: Path, components: Iterable[Any]) -> Path:
    """`root / c1 / c2 ...` with every component sanitised; raises if the result would leave `root` (cannot, but
    the check keeps it so whatever `safe_component` becomes)."""
    path = Path(root).joinpath(*(safe_component(c) for c in components))
    if not Path(os.path.normpath(path)).is_relative_to(os.path.normpath(root)):
        raise ConfigError(f"run directory {path} would lie outside out_dir={root}")
    return path


def examples_digest(examples: Sequence[Any]) -> str:
    """SHA-256 of the examples a run decodes (id, prompt text, reference, in order): the data part of its identity."""
    payload = json.dumps([[ex.id, ex.prompt, ex.reference] for ex in examples], ensure_ascii=False, default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def model_fingerprint(pair: ModelPairConfig) -> dict:
    """Fingerprints of every model file set a `model_pair` config names (target, draft, tokenizer): what identifies
    the weights each spec resolves to, without loading them (rsd.models.source_contract.ModelSource.fingerprint)."""
    from rsd.models.source import model_source

    specs = {"target": pair.target, "draft": pair.draft, "tokenizer": pair.tokenizer}
    return {role: model_source(spec).fingerprint() for role, spec in specs.items() if spec}


def identity_digest(identity: Mapping[str, Any]) -> str:
    """Short hash naming a run directory. The dataset file's path is left out: the examples' own hash (in
    `identity["inputs"]`) says what was read, so moving a file keeps its results and editing it does not."""
    ident = dict(identity)
    ident["dataset"] = {k: v for k, v in (identity.get("dataset") or {}).items() if k != "path"}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:10]


__all__ = ["examples_digest", "identity_digest", "join_inside", "model_fingerprint", "safe_component"]
