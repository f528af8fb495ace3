"""The results store's reader: a run's records and summary read back and checked, the one reader of run files that the
runner and `analysis` share.

A run directory holds `run.json`, `records.jsonl` (one line per prompt) and `summary.json`. A run is complete only
when `summary.json` parses and agrees with `records.jsonl`: the summary stores the prompt ids of the run and the
SHA-256 of the records file, so a records file edited, truncated or appended to after the summary was written is
noticed, and every metric it stores must equal its recomputation from the records (a summary edited by hand is not
a finished run). A record line is corrupt unless it is a record of its schema version, the engine's invariants
included (records.Record.from_json; a summary: summary.Summary.from_json). Corrupt lines are reported (file and
line) and dropped; every valid record is kept and only the missing prompts are decoded again. Writing the files
(atomically, under the run's lock) is rsd.harness.files.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rsd.core.metrics import summarize_records
from rsd.errors import RsdError
from rsd.harness.fields import RecordError, SummaryError, nearly_equal
from rsd.harness.files import run_file_sha256
from rsd.harness.kinds import is_number
from rsd.harness.records import Record
from rsd.harness.summary import Summary


def warn(message: str) -> None:
    """A store warning on stderr (always flushed, so it shows in SLURM logs next to the work it concerns)."""
    print(f"[rsd] warning: {message}", file=sys.stderr, flush=True)


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
    if not (is_number(stored) and is_number(recomputed)):
        return False
    if math.isnan(recomputed):
        return math.isnan(stored)
    return nearly_equal(float(stored), float(recomputed))


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
    if typed.records_sha256 != run_file_sha256(records_path):
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


__all__ = ["RunFilesError", "check_run_files", "complete_summary", "record_problem", "scan_records", "summary_problem",
           "warn"]
