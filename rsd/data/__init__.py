"""Prompt sets: the built-in offline sets, a user's JSONL file, and the paper's hub datasets (XSum, WMT18, Dolly).

Built-in files use the hub datasets' field names, so one prompt template serves both. A hub dataset's `hub_id` may
also be a local copy: a directory of Parquet/JSON/CSV/Arrow files (e.g. from `hf download REPO --repo-type dataset
--local-dir DIR`), a `save_to_disk` directory, or one data file. Which prompts run: the first `num_prompts` in file
order, or with `shuffle_seed` set, the first `num_prompts` of a seeded order that depends only on (seed, id).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rsd.errors import RsdError
from rsd.harness.schema import Dataset
from rsd.registry import DATASETS, lookup

if TYPE_CHECKING:
    import datasets

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"


@dataclass(frozen=True)
class BuiltinSet:
    """A prompt set shipped as a JSONL file (rsd.registry.DATASETS names them): its rows' template and reference."""

    file: Path
    template: str
    reference_field: str
    context_template: str | None = None


XSUM = BuiltinSet(BUILTIN_DIR / "xsum.jsonl", "Summarize the following news article in one sentence.\n\n"
                  "Article: {document}", "summary")
WMT = BuiltinSet(BUILTIN_DIR / "wmt.jsonl", "Translate the following German text into English.\n\nGerman: {de}", "en")
DOLLY = BuiltinSet(BUILTIN_DIR / "dolly.jsonl", "{instruction}", "response",
                   "{instruction}\n\nContext: {context}")


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
    ex_id = str(row[id_field]) if id_field and id_field in row else str(index)
    ref = _field(row, reference_field) if reference_field else None
    if ref is not None and not isinstance(ref, str):
        raise DatasetError(f"example {ex_id!r}: the reference field {reference_field!r} holds a "
                           f"{type(ref).__name__}, not a string; set dataset.reference_field to a text field (or null)")
    return Example(ex_id, prompt, ref)




def read_jsonl(path: Path) -> list[dict]:
    """Rows of a UTF-8 JSONL file, with the line number in any error."""
    if not path.is_file():
        what = "does not exist" if not path.exists() else "is a directory" if path.is_dir() else "is not a regular file"
        raise DatasetError(f"dataset file {path} {what}: point dataset.path at a JSONL file")
    rows = []
    for n, raw in enumerate(path.read_bytes().splitlines(), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise DatasetError(f"{path}:{n} is not UTF-8 text (byte {raw[err.start:err.start + 1]!r} at column "
                               f"{err.start + 1}); re-save the file as UTF-8") from None
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
    """All examples of a built-in set (`xsum_builtin`, `wmt_builtin`, `dolly_builtin`: rsd.registry.DATASETS)."""
    spec = lookup(DATASETS, name)
    rows = read_jsonl(spec.file)
    return [to_example(r, i, spec.template, spec.reference_field, "id", "context", spec.context_template)
            for i, r in enumerate(rows)]


def load_local(path: str | Path) -> list[Example]:
    """A user's JSONL file: `prompt` required, `id` and `reference` (a string) optional."""
    rows = read_jsonl(Path(path).expanduser())
    examples, seen = [], set()
    for n, row in enumerate(rows):
        if not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise DatasetError(f"{path}: record {n + 1} has no non-empty string field 'prompt'")
        ref = row.get("reference")
        if ref is not None and not isinstance(ref, str):
            raise DatasetError(f"{path}: record {n + 1} has a 'reference' that is a {type(ref).__name__}, not a "
                               "string; write it as a JSON string (or leave it out)")
        ex = Example(str(row.get("id", n)), row["prompt"], ref)
        if ex.id in seen:
            raise DatasetError(f"{path}: duplicate id {ex.id!r} (ids name result records and must be unique)")
        seen.add(ex.id)
        examples.append(ex)
    if not examples:
        raise DatasetError(f"{path} holds no records")
    return examples


DATA_FILE_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv", ".arrow": "arrow"}


def is_local_spec(spec: str) -> bool:
    """Whether a `hub_id` names a local path (it exists, or is written as a path) rather than a hub repo."""
    return (Path(spec).expanduser().exists() or spec.startswith(("/", "./", "../", "~"))
            or Path(spec).suffix in DATA_FILE_BUILDERS)


def _pick_split(dsd: "datasets.DatasetDict", split: str, where: str) -> "datasets.Dataset":
    if split in dsd:
        return dsd[split]
    if len(dsd) == 1:  # files without split names (one data file): nothing to choose from
        return next(iter(dsd.values()))
    raise DatasetError(f"{where} has no split {split!r}; set dataset.split to one of {sorted(dsd)}")


def open_local_dataset(spec: str, subset: str | None, split: str) -> "datasets.Dataset":
    """A local copy of a hub dataset: a data file, a `save_to_disk` directory, or a directory of data files.

    A local directory has no named configs: `subset` selects a subdirectory of that name when there is one (the
    layout `hf download` gives for WMT18, `de-en/...`) and is ignored otherwise.
    """
    import datasets

    path = Path(spec).expanduser()
    if not path.exists():
        raise DatasetError(f"dataset.hub_id {spec!r} looks like a local path, but it does not exist")
    if path.is_dir() and subset and (path / subset).is_dir():
        path = path / subset
    if path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
        loaded = datasets.load_from_disk(str(path))
        return _pick_split(loaded, split, str(path)) if isinstance(loaded, datasets.DatasetDict) else loaded
    if path.is_file():
        builder = DATA_FILE_BUILDERS.get(path.suffix)
        if builder is None:
            raise DatasetError(f"dataset.hub_id {spec!r}: unknown data file type {path.suffix!r}; use one of "
                               f"{sorted(DATA_FILE_BUILDERS)}")
        return datasets.load_dataset(builder, data_files={split: str(path)}, split=split)
    return _pick_split(datasets.load_dataset(str(path)), split, str(path))


def hub_fetch_hint(hub_id: str, subset: str | None, split: str) -> str:
    """How to make a hub dataset loadable offline."""
    local = f"data/{hub_id.rsplit('/', 1)[-1]}"
    return (f"On a machine with internet either cache it:  python -c \"import datasets; datasets.load_dataset("
            f"{hub_id!r}, {subset!r}, split={split!r})\"  or copy its files:  hf download {hub_id} --repo-type "
            f"dataset --local-dir {local}  and set dataset.hub_id={local}. Offline alternatives: a built-in set "
            "(dataset=xsum_builtin|wmt_builtin|dolly_builtin) or dataset=local dataset.path=FILE.jsonl")


def open_hub(hub_id: str, subset: str | None, split: str) -> "datasets.Dataset":
    """The split of a hub dataset (from the local cache when offline) or of a local copy (see open_local_dataset)."""
    import datasets

    from rsd.models.hub import go_offline, hub_reachable

    if is_local_spec(hub_id):
        return open_local_dataset(hub_id, subset, split)
    if not hub_reachable():
        go_offline()  # read the cache at once instead of retrying an unreachable hub for minutes
    try:
        return datasets.load_dataset(hub_id, subset, split=split)
    except Exception as err:  # datasets raises many types for "not cached and offline"
        raise DatasetError(f"could not load dataset {hub_id!r} ({subset or 'default'}, split {split!r}): "
                           f"{type(err).__name__}: {err}\n{hub_fetch_hint(hub_id, subset, split)}") from None


def load_hub(hub_id: str, subset: str | None, split: str, template: str, reference_field: str | None,
             id_field: str | None, context_field: str | None, context_template: str | None,
             limit: int | None, shuffle_seed: int | None = None) -> list[Example]:
    """Examples of a hub dataset or a local copy; only the chosen rows (see `choose`) are formatted."""
    ds = open_hub(hub_id, subset, split)
    ids = ([str(x) for x in ds[id_field]] if id_field and id_field in ds.column_names
           else [str(i) for i in range(len(ds))])
    return [to_example(ds[i], i, template, reference_field, id_field, context_field, context_template)
            for i in choose(ids, limit, shuffle_seed, hub_id)]


def choose(ids: list[str], limit: int | None, shuffle_seed: int | None, name: str) -> list[int]:
    """Indices of the prompts to run: file order, or ordered by sha256(seed, id) when `shuffle_seed` is set.

    The order depends only on the seed and each prompt's id (not on library versions or the other rows), so the
    first n prompts stay the first n when num_prompts grows.
    """
    if limit is not None and limit > len(ids):
        raise DatasetError(f"dataset.num_prompts={limit}, but {name} has only {len(ids)} prompts; set "
                           f"dataset.num_prompts<={len(ids)} (or null for all)")
    order = list(range(len(ids)))
    if shuffle_seed is not None:
        order.sort(key=lambda i: hashlib.sha256(f"{shuffle_seed}:{ids[i]}".encode()).digest())
    return order if limit is None else order[:limit]


def load_examples(ds: Dataset) -> list[Example]:
    """The examples a dataset block (conf/dataset/*.yaml) selects: `num_prompts` of them, chosen by `choose`."""
    limit = ds.num_prompts
    if limit is not None and limit < 1:
        raise DatasetError(f"dataset.num_prompts must be >= 1 (or null for all), got {limit}")
    if ds.source == "hub":
        return load_hub(ds.hub_id, ds.subset, ds.split, ds.template, ds.reference_field, ds.id_field,
                        ds.context_field, ds.context_template, limit, ds.shuffle_seed)
    if ds.source == "builtin":
        examples = load_builtin(ds.name)
    elif ds.source == "local":
        if not ds.path:
            raise DatasetError("dataset=local needs a file: dataset.path=FILE.jsonl (one JSON object per line, "
                               "'prompt' required, 'id' and 'reference' optional)")
        examples = load_local(ds.path)
    else:
        raise DatasetError(f"unknown dataset.source {ds.source!r}; use builtin, local or hub")
    name = ds.path if ds.source == "local" else ds.name
    return [examples[i] for i in choose([ex.id for ex in examples], limit, ds.shuffle_seed, str(name))]


def dataset_status(ds: Dataset) -> tuple[bool, str]:
    """(loadable now, where from or how to get it) for a dataset block, without reading its rows.

    A hub dataset is available when it is a local copy, when `datasets` has prepared it in its cache, or when the
    hub copy is in the huggingface_hub cache; otherwise (offline or not) it counts as missing, with the fix.
    """
    if ds.source == "builtin":
        ok = ds.name in DATASETS
        return ok, "built in (rsd/data/builtin)" if ok else f"unknown built-in set {ds.name!r}"
    if ds.source == "local":
        path = Path(str(ds.path or "")).expanduser()
        if ds.path and path.is_file():
            return True, f"local file {path}"
        return False, f"dataset.path {ds.path!r} is not a file: point it at your JSONL prompts"
    hub_id, subset, split = str(ds.hub_id), ds.subset, str(ds.split)
    if is_local_spec(hub_id):
        path = Path(hub_id).expanduser()
        return (True, f"local copy {path}") if path.exists() else (False, f"local path {hub_id} does not exist")
    import datasets
    from huggingface_hub import constants

    prepared = Path(datasets.config.HF_DATASETS_CACHE) / hub_id.replace("/", "___")
    snapshots = Path(constants.HF_HUB_CACHE) / f"datasets--{hub_id.replace('/', '--')}" / "snapshots"
    if prepared.is_dir() and any(prepared.iterdir()):
        return True, f"cached ({prepared})"
    if snapshots.is_dir() and any(snapshots.iterdir()):
        return True, f"cached ({snapshots.parent})"
    return False, hub_fetch_hint(hub_id, subset, split)

