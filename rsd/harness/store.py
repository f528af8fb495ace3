"""The results store: run identity, safe directory names, one owner per run directory, and self-checking files.

A run directory holds `run.json`, `records.jsonl` (one line per prompt) and `summary.json`. A run is complete only
when `summary.json` parses and agrees with `records.jsonl`: the summary stores the prompt ids of the run and the
SHA-256 of the records file, so a records file edited, truncated or appended to after the summary was written is
noticed, and every metric it stores must equal its recomputation from the records (a summary edited by hand is not
a finished run). A record line is corrupt unless it is a record of its schema version, the engine's invariants
included (records.Record.from_json; a summary: Summary.from_json). Corrupt lines are reported (file and line)
and dropped; every valid record is kept and only the missing prompts are decoded again. One process at a time owns
a run directory through an advisory `fcntl.flock` on a lock file next to it; the kernel releases it when the holder
dies, so a SIGKILLed owner never blocks a rerun. A write that fails for lack of space, quota or file size is a
one-line StorageFullError: nothing finished is lost by it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import re
import secrets
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rsd.core.metrics import summarize_records
from rsd.errors import ConfigError, RsdError
from rsd.harness.records import Record, RecordError, Summary, SummaryError
from rsd.harness.schema import ModelPairConfig

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


def model_fingerprint(pair: ModelPairConfig) -> dict:
    """Fingerprints of every model file set a `model_pair` config names (target, draft, tokenizer): what identifies
    the weights each spec resolves to, without loading them (rsd.models.source.ModelSource.fingerprint)."""
    from rsd.models.source import model_source

    specs = {"target": pair.target, "draft": pair.draft, "tokenizer": pair.tokenizer}
    return {role: model_source(spec).fingerprint() for role, spec in specs.items() if spec}


def identity_digest(identity: Mapping[str, Any]) -> str:
    """Short hash naming a run directory. The dataset file's path is left out: the examples' own hash (in
    `identity["inputs"]`) says what was read, so moving a file keeps its results and editing it does not."""
    ident = dict(identity)
    ident["dataset"] = {k: v for k, v in (identity.get("dataset") or {}).items() if k != "path"}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:10]


# ---------------------------------------------------------------------------------------------------- full disks
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})  # no space, over quota, over the file-size limit


class StorageFullError(RsdError):
    """A results file could not be written for lack of space, quota or file size (every finished record is kept)."""


@contextmanager
def storage_full_is_one_line(path: Path) -> Iterator[None]:
    """Turn an OSError of FULL_ERRNOS while writing `path` into a StorageFullError saying nothing was lost and what
    to do; any other error passes unchanged."""
    try:
        yield
    except OSError as err:
        if err.errno not in FULL_ERRNOS:
            raise
        raise StorageFullError(
            f"writing {path} failed: {os.strerror(err.errno)}. Nothing finished was lost: every finished prompt's "
            "record is intact (records are appended and fsync'd, summaries replaced by atomic rename). Free space "
            "(or raise the quota or file-size limit) and rerun the same command to resume") from None


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
        with storage_full_is_one_line(self.path):
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


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write via a uniquely named, fsync'd temporary file and rename: readers see the old file or the whole new one
    (a full disk is one line, StorageFullError)."""
    tmp = _tmp_name(path)
    try:
        with storage_full_is_one_line(path), tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write via a uniquely named temporary file and rename: readers see the old file or the whole new one."""
    _write_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")


def write_records_atomic(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Replace a records file by `records`, one JSON line each, atomically."""
    _write_atomic(path, "".join(json.dumps(r) + "\n" for r in records))


def append_record(path: Path, record: Mapping[str, Any]) -> None:
    """Append one JSON line and make it durable before the next prompt starts (a full disk: StorageFullError; a
    line it cut short is dropped and decoded again on resume)."""
    with storage_full_is_one_line(path), path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def file_sha256(path: Path) -> str | None:
    """SHA-256 of a file's bytes (None if it does not exist)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def record_problem(rec: Any) -> str | None:
    """Why `rec` is not a valid record (rsd.harness.records.Record.from_json: its version's keys, their kinds, then the
    engine's invariants), or None if it is valid."""
    try:
        Record.from_json(rec)
    except RecordError as err:
        return err.problem
    return None


def scan_records(path: Path, prompt_ids: Sequence[str] | None = None) -> tuple[list[dict], list[str]]:
    """The valid records of a records file, in file order, and one message per problem (`FILE:LINE: what`).

    A line is valid if it is a complete, newline-terminated JSON object that `Record.from_json` accepts, its prompt
    is not already recorded above it (the first record of a prompt is kept) and (when `prompt_ids` is given) it
    belongs to the run. Invalid lines are dropped, never the valid lines after them; the valid ones are returned as
    the JSON objects read, so rewriting them keeps their bytes. The file is not modified (see
    `write_records_atomic`). This is the one reader of records files: the runner and `analysis` both use it.
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
        try:
            Record.from_json(rec, where)
        except RecordError as err:
            problems.append(str(err))
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


def _same_value(stored: Any, recomputed: Any) -> bool:
    """A summary value equals its recomputation (floats to rounding, NaN equals NaN, lists element-wise)."""
    if isinstance(recomputed, list):
        return (isinstance(stored, list) and len(stored) == len(recomputed)
                and all(_same_value(a, b) for a, b in zip(stored, recomputed)))
    if recomputed is None or stored is None:
        return stored is recomputed
    if not (_is_number(stored) and _is_number(recomputed)):
        return False
    if math.isnan(recomputed):
        return math.isnan(stored)
    return _close(float(stored), float(recomputed))


def summary_problem(run_dir: Path, prompt_ids: Sequence[str] | None = None) -> tuple[dict | None, str | None]:
    """(summary, None) if `run_dir` holds a complete run, else (None, why) naming the file (None, None: no summary).

    Complete: summary.json parses and is a summary of its version (rsd.harness.records.Summary.from_json), names
    `prompt_ids` (when given), its records checksum matches records.jsonl, every line of that file is a valid record
    of those prompts in order, and every metric the summary stores equals its recomputation from the records.
    """
    path, records_path = run_dir / "summary.json", run_dir / "records.jsonl"
    if not path.exists():
        return None, None
    for file in (path, records_path):
        if file.exists() and not file.is_file():
            return None, f"{file}: not a regular file (a directory?)"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        return None, f"{path}:{err.lineno}: not valid JSON ({err.msg})"
    except UnicodeDecodeError:
        return None, f"{path}:1: not UTF-8 text"
    try:
        typed = Summary.from_json(summary, f"{path}:1")
    except SummaryError as err:
        return None, str(err)
    if prompt_ids is not None and typed.prompt_ids != list(prompt_ids):
        return None, f"{path}:1: its prompt ids differ from the run's prompts"
    records, problems = scan_records(records_path, typed.prompt_ids)
    if problems:
        return None, problems[0]
    if typed.records_sha256 != file_sha256(records_path):
        return None, f"{path}:1: its records checksum disagrees with {records_path}"
    if [r["prompt_id"] for r in records] != typed.prompt_ids:
        return None, f"{records_path}: its records are not one per prompt of {path}, in order"
    recomputed = summarize_records(records, typed.draft_params, typed.target_params)
    for key, value in recomputed.items():
        if key in typed.metrics and not _same_value(typed.metrics[key], value):
            return None, f"{path}:1: {key}={typed.metrics[key]!r:.40} disagrees with its records ({value!r:.40})"
    return summary, None


class RunFilesError(RsdError, OSError):
    """A run directory's own file is in a state no run can write over (a directory where a file belongs)."""


def check_run_files(run_dir: Path) -> None:
    """RunFilesError naming the path and the fix when `run_dir` (or its run.json, records.jsonl or summary.json)
    exists but is not what a run writes there; nothing is touched."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunFilesError(f"{run_dir} is a file where the run's directory belongs: move it away, then rerun")
    for name in ("run.json", "records.jsonl", "summary.json"):
        path = run_dir / name
        if (path.exists() or path.is_symlink()) and not path.is_file():
            raise RunFilesError(f"{path} is not a regular file (a directory or a broken link), so this run cannot "
                                f"be written: move it away (mv {path} {path}.bak), then rerun; the run's other files "
                                "are kept")


def complete_summary(run_dir: Path, prompt_ids: Sequence[str], quiet: bool = False) -> dict | None:
    """The run's summary if the run is complete (`summary_problem`), else None, with a warning saying why when there
    was a summary (unless `quiet`)."""
    summary, why = summary_problem(run_dir, prompt_ids)
    if why and not quiet:
        warn(f"{why}; the run will be completed again (only missing prompts are decoded)")
    return summary


__all__ = ["FULL_ERRNOS", "RunFilesError", "RunLock", "StorageFullError", "append_record", "check_run_files",
           "complete_summary", "examples_digest",
           "file_sha256", "identity_digest", "join_inside", "model_fingerprint", "record_problem",
           "safe_component", "scan_records", "storage_full_is_one_line", "summary_problem", "write_json_atomic",
           "write_records_atomic"]
