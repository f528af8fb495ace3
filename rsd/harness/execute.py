"""One run, from its lock to its summary: decode every prompt not yet recorded, append one fsync'd record per prompt,
then write summary.json (atomically, with the records' checksum), which marks the run complete. A corrupt records
file is repaired first; a run another process holds is left to it (execute returns None).
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from rsd.core.budgets import shape_tag
from rsd.core.engine import Engine
from rsd.core.metrics import corpus_score, task_score
from rsd.core.sampling import prompt_generator
from rsd.data import Example
from rsd.harness.config import RunConfig
from rsd.harness.files import (
    RunLock,
    append_record,
    run_file_sha256,
    storage_full_is_one_line,
    write_json_atomic,
    write_records_atomic,
)
from rsd.harness.logger import make_logger
from rsd.harness.records import Record
from rsd.harness.runs import RunPlan
from rsd.harness.store import complete_summary, scan_records, warn
from rsd.harness.summary import Summary
from rsd.models.hardware import cpu_flags
from rsd.models.pairs import ModelPair


def git_state(where: Path) -> dict:
    """`rsd_git_sha` (HEAD), `rsd_git_dirty` (tracked files differ from HEAD) and `rsd_git_diff_sha256` (sha256 of
    `git diff HEAD`, None when clean) of the checkout holding `where`; all None outside a git checkout."""
    def git(*args: str) -> bytes | None:
        try:
            proc = subprocess.run(["git", *args], capture_output=True, timeout=10, cwd=where)
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout if proc.returncode == 0 else None

    head, diff = git("rev-parse", "HEAD"), git("diff", "HEAD", "--no-ext-diff", "--binary")
    sha = (head or b"").decode().strip() or None
    if sha is None or diff is None:
        return {"rsd_git_sha": sha, "rsd_git_dirty": None, "rsd_git_diff_sha256": None}
    return {"rsd_git_sha": sha, "rsd_git_dirty": bool(diff),
            "rsd_git_diff_sha256": hashlib.sha256(diff).hexdigest() if diff else None}


def environment() -> dict:
    """Versions and hardware, for run.json."""
    import transformers

    return {
        "python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__,
        **git_state(Path(__file__).resolve().parent), "platform": platform.platform(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(), "cpu_flags": list(cpu_flags()), "torch_threads": torch.get_num_threads(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,  # other jobs skew timings
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        **(_cuda_environment() if torch.cuda.is_available() else {}),
    }


def _cuda_environment() -> dict:
    """GPU name, memory, driver and CUDA runtime versions (the driver from nvidia-smi when it is on PATH)."""
    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        driver = None
    return {"gpu_name": props.name, "gpu_memory_gb": round(props.total_memory / 2**30, 1),
            "gpu_count": torch.cuda.device_count(), "cuda_runtime": torch.version.cuda, "gpu_driver": driver}


def decode_prompt(engine: Engine, pair: ModelPair, ex: Example, ids: list[int], rc: RunConfig,
                  draft_length: int, tokens_before_truncation: int | None = None) -> Record:
    """Generate one prompt's continuation and return its record (`tokens_before_truncation`: the prompt's length
    before dataset.max_prompt_tokens cut it, None if it was not cut)."""
    gen = prompt_generator(rc.seed, ex.id, pair.target.device)
    cuda = pair.target.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    out = engine.generate(ids, rc.sampling.max_new_tokens, gen)
    text = pair.decode(out.new_token_ids)
    return Record.build(
        prompt_id=ex.id, prompt_tokens=len(ids), new_token_ids=out.new_token_ids, text=text,
        target_calls=out.target_calls, draft_calls=out.draft_calls, tokens_verified=out.tokens_verified,
        accepted_lengths=out.accepted_lengths, wall_s=out.wall_s, time_draft_s=out.time_draft_s,
        time_target_s=out.time_target_s, time_other_s=out.time_other_s, draft_length=draft_length,
        score=task_score(rc.dataset.task, text, ex.reference), ttft_s=out.ttft_s, decode_s=out.decode_s,
        decode_tokens=out.decode_tokens,
        peak_gpu_memory_gb=torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        expected_emitted=out.expected_emitted, root_optimum=out.root_optimum, root_acceptance=out.root_acceptance,
        prompt_tokens_before_truncation=tokens_before_truncation)


def execute(plan: RunPlan, pair: ModelPair, prompts: list[tuple[Example, list[int]]], rc: RunConfig,
            truncated: Mapping[str, int] | None = None, extra: Mapping[str, Any] | None = None) -> dict | None:
    """Run (or resume, repair or skip) one planned run; returns its summary, or None if another process owns it.

    `truncated` maps the ids of prompts cut by dataset.max_prompt_tokens to their length before the cut; `extra`
    is added to the summary (how the run's shape was selected).
    """
    with storage_full_is_one_line(plan.run_dir):
        plan.run_dir.mkdir(parents=True, exist_ok=True)
    with RunLock(plan.run_dir) as lock:
        if not lock.held:
            return None
        return _execute_owned(plan, pair, prompts, rc, truncated or {}, extra or {})


def _execute_owned(plan: RunPlan, pair: ModelPair, prompts: list[tuple[Example, list[int]]], rc: RunConfig,
                   truncated: Mapping[str, int], extra: Mapping[str, Any]) -> dict:
    """`execute` for the process holding the run's lock."""
    started = time.perf_counter()
    prompt_ids = [ex.id for ex, _ in prompts]
    done_summary = complete_summary(plan.run_dir, prompt_ids)
    if done_summary is not None:
        print(f"[rsd] done already, skipping: {plan.run_dir}", flush=True)
        return done_summary
    drafter = plan.make_drafter()
    engine = Engine(pair.target, pair.draft if drafter.uses_draft_model else None, drafter, rc.sampling.params,
                    pair.eos_token_ids, pair.vocab_size)
    write_json_atomic(plan.run_dir / "run.json", {
        "config": plan.identity, "method": plan.method, "shape": plan.shape, "seed": rc.seed,
        "target_params": pair.target_params, "draft_params": pair.draft_params, "environment": environment()})
    records_path = plan.run_dir / "records.jsonl"
    records, problems = scan_records(records_path, prompt_ids)
    for problem in problems:
        warn(problem)
    if problems:
        write_records_atomic(records_path, records)
        print(f"[rsd] rewrote {records_path} with its {len(records)} valid records", flush=True)
    done = {r["prompt_id"] for r in records}
    task = rc.dataset.task
    logger = make_logger(rc.logger, plan)
    todo = [(ex, ids) for ex, ids in prompts if ex.id not in done]
    if done:
        print(f"[rsd] resuming {plan.run_dir}: {len(done)} of {len(prompts)} prompts already recorded", flush=True)
    tag = f"{plan.method} {shape_tag(plan.shape)}"
    use_bar = sys.stderr.isatty() or bool(os.environ.get("RSD_PROGRESS"))
    bar = tqdm(todo, desc=tag, unit="prompt", leave=False, disable=not use_bar)
    if todo:
        engine.warm_up(todo[0][1])  # untimed, its own generator: no prompt's randomness or record is touched
    for ex, ids in bar:
        record = decode_prompt(engine, pair, ex, ids, rc, drafter.draft_length, truncated.get(ex.id)).to_json()
        append_record(records_path, record)
        records.append(record)
        logger.log_prompt(len(records) - 1, record)
        running = sum(r["new_tokens"] for r in records) / sum(r["target_calls"] for r in records)
        if use_bar:
            bar.set_postfix(be=f"{running:.2f}")
        else:  # logs (SLURM, pipes): one plain line per prompt
            print(f"[rsd] {tag} seed {rc.seed}: prompt {ex.id} ({len(records)}/{len(prompts)}) "
                  f"{record['new_tokens']} tokens, block efficiency {record['block_efficiency']:.2f}, "
                  f"running {running:.2f}", file=sys.stderr, flush=True)
    by_id = {r["prompt_id"]: r for r in records}
    ordered = [by_id[pid] for pid in prompt_ids]
    if [r["prompt_id"] for r in records] != prompt_ids:  # a repaired file resumed out of order: store in plan order
        write_records_atomic(records_path, ordered)
    summary = Summary.build(
        method=plan.method, shape=plan.shape, shape_tag=shape_tag(plan.shape), draft_length=drafter.draft_length,
        tree_size=drafter.max_tree_size, budget=rc.budget.kind if drafter.draft_length else None,
        budget_value=rc.budget.tag if drafter.draft_length else "-", model_pair=rc.model_pair.name,
        dataset=rc.dataset.name, task=task, sampling=asdict(rc.sampling), seed=rc.seed,
        target_params=pair.target_params, draft_params=pair.draft_params, records=ordered,
        accuracy=corpus_score(task, [r["text"] for r in ordered], [ex.reference for ex, _ in prompts]),
        run_dir=str(plan.run_dir), config=plan.identity, records_sha256=run_file_sha256(records_path), extra=extra,
        # what this process spent on the run (warm-up, decoding, expected yields, scoring), for compute accounting;
        # a resumed run counts only its last part
        elapsed_s=time.perf_counter() - started).to_json()
    write_json_atomic(plan.run_dir / "summary.json", summary)
    logger.log_summary(summary)
    logger.close()
    return summary
