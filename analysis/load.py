"""Load run directories into tidy tables: one row per run, one per prompt, one per verification step.

Run-level metrics come from each run's summary.json (written by rsd.runner.execute); per-prompt metrics are computed
from records.jsonl with the same definitions (rsd.metrics, docs/algorithms.md#metrics). Ratios are to the AR run with
the same model pair, dataset, sampling settings and seed; per-prompt ratios divide a prompt's value by that AR run's
value.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rsd.metrics import block_efficiency, mbsu, token_rate

log = logging.getLogger(__name__)

SAMPLING = ("temperature", "top_k", "top_p", "max_new_tokens")
SETTING = ("model_pair", "dataset", *SAMPLING)  # runs of different settings are never averaged together
AR_KEYS = (*SETTING, "seed")  # a run is compared with the AR run that matches on these
RUN_KEYS = ("method", "shape_tag", "budget", "x", *AR_KEYS, "run_dir")  # repeated in the prompt and step tables
BUDGET_AXIS = {"fixed_length": "draft_length", "fixed_compute": "target_tokens"}
TIMES = ("draft", "target", "other")


@dataclass(frozen=True)
class Tables:
    """The tidy tables of a set of completed runs."""

    runs: pd.DataFrame
    prompts: pd.DataFrame
    steps: pd.DataFrame


def find_run_dirs(roots: Iterable[Path | str]) -> list[Path]:
    """Every directory at or below `roots` holding a run.json, resolved, sorted, once; a missing root raises."""
    found = set()
    for root in map(Path, roots):
        if not root.exists():
            raise FileNotFoundError(f"no such results directory: {root}")
        found.update(p.parent.resolve() for p in root.rglob("run.json"))
    return sorted(found)


def completed(run_dirs: Iterable[Path]) -> list[Path]:
    """The run directories with a summary.json; each one without it is skipped with a warning naming it."""
    done = []
    for run_dir in run_dirs:
        if (run_dir / "summary.json").exists():
            done.append(run_dir)
        else:
            log.warning("skipping incomplete run (no summary.json): %s", run_dir)
    return done


def read_jsonl(path: Path) -> list[dict]:
    """The JSON objects of a JSON-lines file, one per non-empty line."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def budget_point(summary: Mapping[str, Any]) -> int | None:
    """A run's x: draft length at fixed_length, target tokens at fixed_compute, None without a budget (AR)."""
    key = BUDGET_AXIS.get(summary["budget"])
    return summary["config"]["budget"][key] if key else None


def nan_if_none(value: float | None) -> float:
    """`value` as a float, NaN for None."""
    return float("nan") if value is None else float(value)


def run_keys(run_dir: Path, summary: Mapping[str, Any]) -> dict:
    """The identifying columns of a run (RUN_KEYS)."""
    return {"method": summary["method"], "shape_tag": summary["shape_tag"], "budget": summary["budget"],
            "x": budget_point(summary), "model_pair": summary["model_pair"], "dataset": summary["dataset"],
            **{k: summary["sampling"][k] for k in SAMPLING}, "seed": summary["seed"], "run_dir": str(run_dir)}


def run_row(run_dir: Path, summary: Mapping[str, Any]) -> dict:
    """One run's row: keys, summary metrics, the time split and acceptance by depth (accept_d1.., last)."""
    wall = summary["wall_s"]
    return {
        **run_keys(run_dir, summary),
        "shape": json.dumps(summary["shape"], sort_keys=True), "budget_value": summary["budget_value"],
        "task": summary["task"], "draft_length": summary["draft_length"], "tree_size": summary["tree_size"],
        "target_params": summary["target_params"], "draft_params": summary["draft_params"],
        "prompts": summary["prompts"], "new_tokens": summary["new_tokens"], "target_calls": summary["target_calls"],
        "draft_calls": summary["draft_calls"], "block_efficiency": summary["block_efficiency"],
        "mbsu": summary["mbsu"], "token_rate": summary["token_rate"], "token_rate_ratio": float("nan"),
        "accuracy": nan_if_none(summary["accuracy"]), "accuracy_ratio": float("nan"),  # ratios: set by add_ratios
        "mean_accepted_length": summary["mean_accepted_length"],
        "tokens_verified_per_call": summary["tokens_verified_per_call"],
        "wall_s": wall, **{f"time_{t}_s": summary[f"time_{t}_s"] for t in TIMES},
        **{f"frac_{t}": summary[f"time_{t}_s"] / wall if wall > 0 else float("nan") for t in TIMES},
        **{f"accept_d{d}": a for d, a in enumerate(summary["acceptance_by_depth"], start=1)},
    }


def prompt_row(keys: Mapping[str, Any], record: Mapping[str, Any], draft_params: int, target_params: int) -> dict:
    """One prompt's row: run keys and the prompt's own BE, MBSU, token rate, time split and score."""
    be = block_efficiency(record["new_tokens"], record["target_calls"])
    steps = record["accepted_lengths"]
    return {
        **keys, "prompt_id": record["prompt_id"], "prompt_tokens": record["prompt_tokens"],
        "new_tokens": record["new_tokens"], "target_calls": record["target_calls"],
        "draft_calls": record["draft_calls"], "block_efficiency": be,
        "mbsu": mbsu(be, record["draft_calls"] / record["target_calls"], draft_params, target_params),
        "token_rate": token_rate(record["new_tokens"], record["wall_s"]),
        "mean_accepted_length": float(np.mean(steps)) if steps else float("nan"),
        "wall_s": record["wall_s"], **{f"time_{t}_s": record[f"time_{t}_s"] for t in TIMES},
        "score": nan_if_none(record["score"]),
    }


def step_frame(keys: Mapping[str, Any], records: list[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per target call of every prompt: run keys, prompt_id, step (from 1), accepted_length, tokens_verified."""
    counts = [len(r["accepted_lengths"]) for r in records]
    frame = pd.DataFrame({
        "prompt_id": np.repeat([r["prompt_id"] for r in records], counts),
        "step": np.concatenate([np.arange(1, n + 1) for n in counts]) if records else [],
        "accepted_length": [a for r in records for a in r["accepted_lengths"]],
        "tokens_verified": [t for r in records for t in r["tokens_verified"]],
    })
    return frame.assign(**keys)[[*RUN_KEYS, "prompt_id", "step", "accepted_length", "tokens_verified"]]


def ar_baselines(runs: pd.DataFrame) -> pd.DataFrame:
    """Per AR_KEYS: the AR token rate and accuracy (mean if several AR runs match)."""
    ar = runs[runs["method"] == "ar"]
    means = ar.groupby(list(AR_KEYS), dropna=False)[["token_rate", "accuracy"]].mean()
    return means.rename(columns={"token_rate": "ar_token_rate", "accuracy": "ar_accuracy"}).reset_index()


def warn_missing_ar(runs: pd.DataFrame) -> None:
    """Warn once per setting and seed that has runs but no AR run (its ratios are NaN)."""
    for keys, group in runs[runs["ar_token_rate"].isna()].groupby(list(AR_KEYS), dropna=False):
        setting = ", ".join(f"{k}={v}" for k, v in zip(AR_KEYS, keys))
        log.warning("no AR run for %s: token-rate and accuracy ratios of its %d run(s) are NaN", setting, len(group))


def add_ratios(runs: pd.DataFrame, prompts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Add token_rate_ratio and accuracy_ratio (to the matching AR run) to the run and prompt tables."""
    runs = runs.merge(ar_baselines(runs), on=list(AR_KEYS), how="left")
    warn_missing_ar(runs)
    runs["token_rate_ratio"] = runs["token_rate"] / runs["ar_token_rate"]
    runs["accuracy_ratio"] = runs["accuracy"] / runs["ar_accuracy"]
    prompts = prompts.merge(runs[["run_dir", "ar_token_rate", "ar_accuracy"]], on="run_dir", how="left")
    prompts["token_rate_ratio"] = prompts["token_rate"] / prompts["ar_token_rate"]
    prompts["accuracy_ratio"] = prompts["score"] / prompts["ar_accuracy"]
    drop = ["ar_token_rate", "ar_accuracy"]
    return runs.drop(columns=drop), prompts.drop(columns=drop)


def tidy(frame: pd.DataFrame, first: Iterable[str]) -> pd.DataFrame:
    """`first` columns first, x as a nullable integer, rows in a stable order."""
    first = list(first)
    frame = frame[first + [c for c in frame.columns if c not in first]].astype({"x": "Int64"})
    order = [c for c in (*SETTING, "budget", "x", "method", "shape_tag", "seed", "prompt_id", "step") if c in frame]
    return frame.sort_values(order, na_position="first", kind="stable").reset_index(drop=True)


def load(roots: Iterable[Path | str]) -> Tables:
    """The run, prompt and step tables of every completed run under `roots`; ValueError if there is none."""
    roots = list(roots)
    run_dirs = completed(find_run_dirs(roots))
    if not run_dirs:
        raise ValueError(f"no completed run (a directory with run.json and summary.json) under {roots}")
    runs, prompts, steps = [], [], []
    for run_dir in run_dirs:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        records = read_jsonl(run_dir / "records.jsonl")
        keys = run_keys(run_dir, summary)
        runs.append(run_row(run_dir, summary))
        prompts += [prompt_row(keys, r, summary["draft_params"], summary["target_params"]) for r in records]
        steps.append(step_frame(keys, records))
    run_table, prompt_table = add_ratios(pd.DataFrame(runs), pd.DataFrame(prompts))
    return Tables(tidy(run_table, RUN_KEYS), tidy(prompt_table, [*RUN_KEYS, "prompt_id"]),
                  tidy(pd.concat(steps, ignore_index=True), RUN_KEYS))
