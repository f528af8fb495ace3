"""Prompt sets: the built-in offline sets, a user's JSONL file, and the paper's hub datasets (XSum, WMT18, Dolly).

Built-in files use the hub datasets' field names, so one prompt template serves both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsd.errors import RsdError

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"

# The built-in sets: file, template and reference field (conf/dataset/*_builtin.yaml name them).
BUILTIN = {
    "xsum_builtin": {"file": "xsum.jsonl", "template": "Summarize the following news article in one sentence.\n\n"
                     "Article: {document}", "reference_field": "summary", "task": "summarization"},
    "wmt_builtin": {"file": "wmt.jsonl", "template": "Translate the following German text into English.\n\n"
                    "German: {de}", "reference_field": "en", "task": "translation"},
    "dolly_builtin": {"file": "dolly.jsonl", "template": "{instruction}",
                      "context_template": "{instruction}\n\nContext: {context}", "reference_field": "response",
                      "task": "instruction"},
}


class DatasetError(RsdError, ValueError):
    """A dataset could not be loaded or is malformed; the message says what to do."""


@dataclass(frozen=True)
class Example:
    """One prompt: `prompt` is the user text before any chat template; `reference` may be None."""

    id: str
    prompt: str
    reference: str | None = None


def _field(row: Mapping[str, Any], name: str) -> Any:
    """A possibly dotted field (`translation.de`)."""
    value: Any = row
    for part in name.split("."):
        value = value[part]
    return value


def _format(template: str, row: Mapping[str, Any]) -> str:
    class Row(dict):
        def __missing__(self, key: str) -> Any:
            return _field(row, key)

    return template.format_map(Row())


def to_example(row: Mapping[str, Any], index: int, template: str, reference_field: str | None,
               id_field: str | None = "id", context_field: str | None = None,
               context_template: str | None = None) -> Example:
    """Apply a dataset's template to one raw row."""
    use_context = context_field and context_template and str(row.get(context_field) or "").strip()
    prompt = _format(context_template if use_context else template, row)
    ref = _field(row, reference_field) if reference_field else None
    ex_id = str(row[id_field]) if id_field and id_field in row else str(index)
    return Example(ex_id, prompt, ref)


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSONL file, with the line number in any error."""
    if not path.is_file():
        raise DatasetError(f"dataset file {path} does not exist")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise DatasetError(f"{path}:{n} is not valid JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise DatasetError(f"{path}:{n} must be a JSON object, got {type(row).__name__}")
        rows.append(row)
    return rows


def load_builtin(name: str) -> list[Example]:
    """All examples of a built-in set (`xsum_builtin`, `wmt_builtin`, `dolly_builtin`)."""
    if name not in BUILTIN:
        raise DatasetError(f"unknown built-in dataset {name!r}; choose one of {sorted(BUILTIN)}")
    spec = BUILTIN[name]
    rows = read_jsonl(BUILTIN_DIR / spec["file"])
    return [to_example(r, i, spec["template"], spec["reference_field"], "id", "context",
                       spec.get("context_template")) for i, r in enumerate(rows)]


def load_local(path: str | Path) -> list[Example]:
    """A user's JSONL file: `prompt` required, `id` and `reference` optional."""
    rows = read_jsonl(Path(path).expanduser())
    examples, seen = [], set()
    for n, row in enumerate(rows):
        if not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise DatasetError(f"{path}: record {n + 1} has no non-empty string field 'prompt'")
        ex = Example(str(row.get("id", n)), row["prompt"], row.get("reference"))
        if ex.id in seen:
            raise DatasetError(f"{path}: duplicate id {ex.id!r} (ids name result records and must be unique)")
        seen.add(ex.id)
        examples.append(ex)
    if not examples:
        raise DatasetError(f"{path} holds no records")
    return examples


def load_hub(hub_id: str, subset: str | None, split: str, template: str, reference_field: str | None,
             id_field: str | None, context_field: str | None, context_template: str | None,
             limit: int | None) -> list[Example]:
    """A hub dataset through `datasets` (from the local cache when offline)."""
    import datasets

    try:
        ds = datasets.load_dataset(hub_id, subset, split=split)
    except Exception as err:  # datasets raises many types for "not cached and offline"
        raise DatasetError(
            f"could not load dataset {hub_id!r} ({subset or 'default'}, split {split!r}): {type(err).__name__}: "
            f"{err}\nOn a machine with internet run once:  python -c \"import datasets; "
            f"datasets.load_dataset({hub_id!r}, {subset!r}, split={split!r})\"  (it is then cached), or use a "
            f"built-in set (dataset=xsum_builtin|wmt_builtin|dolly_builtin) or dataset=local dataset.path=FILE.jsonl"
        ) from None
    n = len(ds) if limit is None else min(limit, len(ds))
    return [to_example(ds[i], i, template, reference_field, id_field, context_field, context_template)
            for i in range(n)]


def load_examples(cfg: Mapping[str, Any]) -> list[Example]:
    """Examples for a dataset config (conf/dataset/*.yaml), cut to `num_prompts` when set."""
    source = cfg.get("source", "builtin")
    limit = cfg.get("num_prompts")
    if limit is not None and limit < 1:
        raise DatasetError(f"dataset.num_prompts must be >= 1 (or null for all), got {limit}")
    if source == "builtin":
        examples = load_builtin(cfg["name"])
    elif source == "local":
        if not cfg.get("path"):
            raise DatasetError("dataset=local needs a file: dataset.path=FILE.jsonl (one JSON object per line, "
                               "'prompt' required, 'id' and 'reference' optional)")
        examples = load_local(cfg["path"])
    elif source == "hub":
        examples = load_hub(cfg["hub_id"], cfg.get("subset"), cfg["split"], cfg["template"],
                            cfg.get("reference_field"), cfg.get("id_field"), cfg.get("context_field"),
                            cfg.get("context_template"), limit)
    else:
        raise DatasetError(f"unknown dataset.source {source!r}; use builtin, local or hub")
    return examples if limit is None else examples[:limit]
