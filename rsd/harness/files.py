"""Writing a run's files safely: one owner per run directory (RunLock), atomic replacement, durable appends, and a
full disk as one line (StorageFullError).

One process at a time owns a run directory through an advisory `fcntl.flock` on a lock file next to it; the kernel
releases it when the holder dies, so a SIGKILLed owner never blocks a rerun. A write that fails for lack of space,
quota or file size is a one-line StorageFullError: nothing finished is lost by it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import secrets
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rsd.errors import RsdError

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


def run_file_sha256(path: Path) -> str | None:
    """SHA-256 of a run file's bytes (None if it does not exist). Never memoised, unlike the models' file_sha256:
    a run's records are rewritten in place, and a checksum must see every rewrite."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


__all__ = ["FULL_ERRNOS", "RunLock", "StorageFullError", "append_record", "run_file_sha256", "storage_full_is_one_line",
           "write_bytes_atomic", "write_json_atomic", "write_records_atomic"]
