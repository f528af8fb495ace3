"""Load run directories into tidy tables: one row per run, one per prompt, one per verification step.

Only complete runs are read: a run counts when rsd.harness.store.summary_problem accepts it (summary marked complete,
records checksum matching, every record valid, every stored metric equal to its recomputation from the records). Every
other run directory is named, with the reason, in `Tables.skipped` and a warning; the records are read with the store's
reader (rsd.harness.store.scan_records), so the runner and the analysis see the same records. A run's rows come from
analysis.rows, the columns computed across runs (ratios to AR, greedy divergence, SEs) from analysis.derived.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.columns import RUN_KEYS, SETTING
from analysis.derived import add_ratios, add_standard_errors, greedy_divergence, omit_dial_speed
from analysis.rows import prompt_row, run_keys, run_row, step_frame
from rsd.harness.store import scan_records, summary_problem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Tables:
    """The tidy tables of a set of completed runs."""

    runs: pd.DataFrame
    prompts: pd.DataFrame
    steps: pd.DataFrame
    skipped: list[str] = field(default_factory=list)  # one line per run directory left out, with the reason


class Unreadable(ValueError):
    """A run directory whose summary cannot be used (the message names the file and the reason)."""


def find_run_dirs(roots: Iterable[Path | str]) -> list[Path]:
    """Every directory at or below `roots` holding a run.json, followed through symbolic links, sorted, once (a run
    reached by two paths is listed by the first); a missing root raises. Paths stay as found, made absolute."""
    found: dict[str, Path] = {}
    for root in map(Path, roots):
        if not root.exists():
            raise FileNotFoundError(f"no such results directory: {root}")
        seen: set[str] = set()
        for here, dirs, files in os.walk(root.absolute(), followlinks=True):
            real = os.path.realpath(here)
            if real in seen:  # a link back up the tree: walked already
                dirs.clear()
                continue
            seen.add(real)
            if "run.json" in files:
                found.setdefault(real, Path(here))
    return sorted(found.values())


def completed(run_dirs: Iterable[Path]) -> list[Path]:
    """The run directories with a summary.json, each one without it skipped with a warning naming it (for audits of
    the records themselves, e.g. analysis.calibration; `load` reads only runs the store accepts)."""
    done = []
    for run_dir in run_dirs:
        if (run_dir / "summary.json").exists():
            done.append(run_dir)
        else:
            log.warning("skipping incomplete run (no summary.json): %s", run_dir)
    return done


def valid_records(path: Path) -> list[dict]:
    """The valid records of a records file, read by the store's reader (each problem named in a warning)."""
    records, problems = scan_records(path)
    for problem in problems:
        log.warning("%s", problem)
    return records


def tidy(frame: pd.DataFrame, first: Iterable[str]) -> pd.DataFrame:
    """`first` columns first, x as a nullable integer, rows in a stable order."""
    first = list(first)
    frame = frame[first + [c for c in frame.columns if c not in first]].astype({"x": "Int64"})
    order = [c for c in (*SETTING, "budget", "x", "method", "shape_tag", "seed", "prompt_id", "step") if c in frame]
    return frame.sort_values(order, na_position="first", kind="stable").reset_index(drop=True)


def read_run(run_dir: Path) -> tuple[dict, list[dict], pd.DataFrame, dict]:
    """One complete run's row, prompt rows, step frame and {prompt_id: token ids}; Unreadable (naming the file and
    the reason) unless rsd.harness.store.summary_problem accepts the run."""
    summary, why = summary_problem(run_dir)
    if summary is None:
        raise Unreadable(why or f"{run_dir}: incomplete run (no summary.json)")
    records, _ = scan_records(run_dir / "records.jsonl")  # valid and one per prompt: summary_problem checked them
    try:
        keys = run_keys(run_dir, summary)
        row = run_row(run_dir, summary, records)
        prompts = [prompt_row(keys, r, summary["draft_params"], summary["target_params"]) for r in records]
        steps = step_frame(keys, records)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as err:
        raise Unreadable(f"{run_dir / 'summary.json'}: {type(err).__name__}: {err}") from err
    return row, prompts, steps, {r["prompt_id"]: r.get("new_token_ids") for r in records}


def load(roots: Iterable[Path | str]) -> Tables:
    """The run, prompt and step tables of every complete run under `roots`; ValueError if there is none.

    Every other run directory is left out, named in a warning and in `Tables.skipped` (see the module docstring).
    """
    roots = list(roots)
    runs, prompts, steps, tokens, skipped = [], [], [], {}, []
    for run_dir in find_run_dirs(roots):
        try:
            row, prompt_rows, step_rows, ids = read_run(run_dir)
        except Unreadable as err:
            skipped.append(str(err))
            log.warning("skipping %s", err)
            continue
        runs.append(row)
        prompts += prompt_rows
        steps.append(step_rows)
        tokens[str(run_dir)] = ids
    if not runs:
        raise ValueError(f"no complete run (a directory with run.json and a summary.json agreeing with its records) "
                         f"under {', '.join(map(str, roots))} ({len(skipped)} skipped)")
    run_table, prompt_table = omit_dial_speed(*add_ratios(pd.DataFrame(runs), pd.DataFrame(prompts)))
    run_table, prompt_table = greedy_divergence(run_table, prompt_table, tokens)
    run_table = add_standard_errors(run_table, prompt_table)
    return Tables(tidy(run_table, RUN_KEYS), tidy(prompt_table, [*RUN_KEYS, "prompt_id"]),
                  tidy(pd.concat(steps, ignore_index=True), RUN_KEYS), skipped)
