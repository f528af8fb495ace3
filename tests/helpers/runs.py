"""Synthetic run directories and records, as the runner writes them, for the store and analysis tests; and lookups
into the tables the analysis builds from them."""

import json
from pathlib import Path

import pandas as pd

from rsd.harness.files import run_file_sha256
from rsd.harness.records import Record
from rsd.harness.summary import Summary

TARGET, DRAFT = 1000, 100  # r = 0.1
HOT = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 8}
TAG = {"fixed_length": "L", "fixed_compute": "B"}


def record(pid: str, accepted: list[int], wall: float, score: float, drafts_per_step: int, depth: int) -> dict:
    """A prompt record whose step k emits accepted[k] + 1 tokens; time split 1/4 draft, 1/2 target, 1/4 other. In
    the version-1 layout (no decode phase, expected yields or root optimum: a test adds those it needs)."""
    calls = len(accepted)
    return Record.build(prompt_id=pid, prompt_tokens=5, new_token_ids=[7] * (sum(accepted) + calls), text="",
                        target_calls=calls, draft_calls=drafts_per_step * calls, tokens_verified=[depth * 2] * calls,
                        accepted_lengths=accepted, wall_s=wall, time_draft_s=wall / 4, time_target_s=wall / 2,
                        time_other_s=wall / 4, draft_length=depth, score=score, schema_version=1).to_json()


def write_run(root: Path, name: str, method: str, shape: dict, tag: str, budget: str | None, x: int | None,
              records: list[dict], accuracy: float, sampling: dict = HOT, complete: bool = True,
              extra: dict | None = None, pair: dict | None = None, draft_params: int = DRAFT) -> Path:
    """A run directory as execute.execute leaves it (summary.json only if `complete`; `extra` joins the summary;
    `pair`: the config's model_pair, named in the summary, default pairA without one; AR has 0 draft params)."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    budget_cfg = None if budget is None else {
        "kind": budget, "draft_length": x if budget == "fixed_length" else None,
        "target_tokens": x if budget == "fixed_compute" else 6}
    stored_pair = {"model_pair": {"target": "tiny:llama", **pair}} if pair else {}  # a full block, as a run stores
    config = {"budget": budget_cfg, "sampling": sampling, "seed": 0, **stored_pair}
    (run_dir / "run.json").write_text(json.dumps({"config": config, "method": method, "shape": shape}))
    (run_dir / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if complete:
        draft_params = draft_params if budget else 0
        summary = Summary.build(
            method=method, shape=shape, shape_tag=tag, draft_length=records[0]["draft_length"],
            tree_size=2 * records[0]["draft_length"], budget=budget,
            budget_value="-" if budget is None else TAG[budget] + str(x), model_pair=pair["name"] if pair else "pairA",
            dataset="dolly_builtin", task="instruction", sampling=sampling, seed=0, target_params=TARGET,
            draft_params=draft_params, records=records, accuracy=accuracy, run_dir=str(run_dir), config=config,
            records_sha256=run_file_sha256(run_dir / "records.jsonl"), extra=extra)
        (run_dir / "summary.json").write_text(json.dumps(summary.to_json()))
    return run_dir


def one(frame: pd.DataFrame, **keys) -> pd.Series:
    mask = pd.Series(True, index=frame.index)
    for key, value in keys.items():
        mask &= frame[key].eq(value).fillna(False).astype(bool)
    rows = frame[mask]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def section(markdown: str, *needles: str) -> str:
    """The one table (heading to next heading) whose heading line contains every needle."""
    [found] = [part for part in markdown.split("### ") if all(n in part.split("\n")[0] for n in needles)]
    return found
