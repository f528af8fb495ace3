"""Run a resolved config: plan the runs (validated before any model loads), decode every prompt, write results.

One config can expand into several runs (one per tree shape meeting the budget). Each run lives in a directory
derived from its identity: the resolved config, a hash of the examples it decodes and a fingerprint of the model
files (rsd.store). `records.jsonl` gets one fsync'd line per prompt; `summary.json`, written by atomic rename with a
checksum of the records, marks the run complete. A rerun skips complete runs (without loading any model, and without
writing anything, when the whole job is complete), repairs corrupt files and resumes unfinished runs. A run another
process holds is tried again after this job's other runs (taken over if its holder died) and, while still held, for a
bounded time; a run left to a live holder is named at the end.
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from tqdm import tqdm

from rsd.budgets import Budget, shape_tag
from rsd.config import RunConfig, resolve_config, to_dict
from rsd.data import Example, load_examples
from rsd.drafters.base import Drafter
from rsd.engine import Engine
from rsd.errors import ConfigError
from rsd.logger import make_logger
from rsd.metrics import corpus_score, metric_name, summarize_records, task_score
from rsd.models.hardware import cpu_flags
from rsd.models.pairs import (
    ModelPair,
    encode_prompt,
    load_pair,
    load_pair_tokenizer,
    pair_context_length,
    text_token_ids,
)
from rsd.sampling import prompt_generator
from rsd.selection import rank_shapes, split_tuning
from rsd.store import (
    RunLock,
    StorageFullError,
    append_record,
    complete_summary,
    examples_digest,
    file_sha256,
    identity_digest,
    join_inside,
    model_fingerprint,
    read_records,
    scan_records,
    storage_full_is_one_line,
    warn,
    write_json_atomic,
    write_records_atomic,
)
from rsd.validate import check_out_dir

# A job whose run another process holds tries it again every BUSY_POLL_S, after its own runs, for up to BUSY_WAIT_S:
# long enough to take over from a holder that just died or to report a run about to finish, short enough that two
# sweeps sharing an out_dir keep working in parallel rather than one idling behind the other.
BUSY_POLL_S = 2.0
BUSY_WAIT_S = 60.0


class PromptTooLongError(ConfigError):
    """A prompt plus the generation budget does not fit the models' context."""


@dataclass
class RunPlan:
    """One run: a drafter class and shape, and the directory its results go to."""

    method: str
    drafter_cls: type[Drafter]
    shape: dict
    identity: dict
    run_dir: Path
    verifier: str | None = None  # drafter.verifier from the YAML, overriding the class's

    def make_drafter(self) -> Drafter:
        drafter = self.drafter_cls(**self.shape)
        if self.verifier is not None:
            drafter.verifier = self.verifier
        return drafter


def run_inputs(cfg: RunConfig | Mapping[str, Any], examples: list[Example]) -> dict:
    """What a run reads besides its config: the hash of its examples and the fingerprint of its model files."""
    pair = cfg.model_pair.spec if isinstance(cfg, RunConfig) else cfg["model_pair"]
    return {"examples_sha256": examples_digest(examples), "model_files": model_fingerprint(pair)}


def _g(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def run_dir_for(out_dir: Path, identity: Mapping[str, Any], budget: Budget | None) -> Path:
    """A stable, readable directory below `out_dir`: pair/dataset/sampling/budget/method-shape-seed-hash.

    Every component is sanitised (rsd.store.safe_component), so no config value can lead outside `out_dir`.
    """
    s = identity["sampling"]
    sampling = f"T{_g(s['temperature'])}-k{s['top_k']}-p{_g(s['top_p'])}-n{s['max_new_tokens']}"
    leaf = (f"{identity['drafter']['name']}-{shape_tag(identity['drafter']['shape'])}-s{identity['seed']}-"
            f"{identity_digest(identity)}")
    budget_tag = budget.tag if budget is not None else "no-draft"
    return join_inside(Path(out_dir), [identity["model_pair"]["name"], identity["dataset"]["name"], sampling,
                                       budget_tag, leaf])


def resolved(cfg: RunConfig | DictConfig | Mapping) -> RunConfig:
    """`cfg` as a RunConfig, resolving (and so checking) it unless it is one already."""
    return cfg if isinstance(cfg, RunConfig) else resolve_config(cfg)


def plan_runs(cfg: RunConfig | DictConfig | Mapping, inputs: Mapping[str, Any] | None = None) -> list[RunPlan]:
    """Every run a config asks for; a raw config is resolved first (ConfigError before any model loads).

    `inputs` (`run_inputs`: examples hash, model fingerprint) completes each run's identity and so its directory;
    without it the plans serve validation only (their directories leave out what the run reads).
    """
    rc = resolved(cfg)
    plans = []
    for shape in rc.drafter.shapes:
        uses_draft = rc.drafter.make(shape).draft_length > 0
        ident = rc.identity(shape, uses_draft, inputs)
        plans.append(RunPlan(rc.drafter.method, rc.drafter.cls, dict(shape), ident,
                             run_dir_for(rc.out_dir, ident, rc.budget if uses_draft else None), rc.drafter.verifier))
    return plans


def environment() -> dict:
    """Versions and hardware, for run.json."""
    import transformers

    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        sha = None
    return {
        "python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__,
        "rsd_git_sha": sha, "platform": platform.platform(), "processor": platform.processor(),
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


def prepare_prompts(examples: list[Example], tokenizer: Any, chat: bool, max_prompt_tokens: int | None
                    ) -> tuple[list[tuple[Example, list[int]]], dict[str, int]]:
    """Token ids of every prompt, and {prompt id: tokens before truncation} for the prompts that were cut.

    With `dataset.max_prompt_tokens` set, a longer prompt keeps the START of its text: the text (before any chat
    template) is cut to as many of its first tokens as let the templated prompt fit in max_prompt_tokens, so the
    instruction that opens a prompt and the chat template's generation prompt stay whole (what a model sees when
    a long article is cut short). A limit too small for the template itself is a ConfigError.
    """
    prompts, cut = [], {}
    for ex in examples:
        ids = encode_prompt(tokenizer, chat, ex.prompt)
        if max_prompt_tokens is not None and len(ids) > max_prompt_tokens:
            text_ids = text_token_ids(tokenizer, ex.prompt)
            keep = len(text_ids) - (len(ids) - max_prompt_tokens)
            while keep > 0:  # detokenising and re-encoding may shift a few tokens: cut until it fits
                short = encode_prompt(tokenizer, chat, tokenizer.decode(text_ids[:keep]))
                if len(short) <= max_prompt_tokens:
                    break
                keep -= len(short) - max_prompt_tokens
            if keep <= 0:
                raise ConfigError(f"dataset.max_prompt_tokens={max_prompt_tokens} leaves no room for the text of "
                                  f"prompt {ex.id!r} (its template alone takes {len(ids) - len(text_ids)} tokens); "
                                  "raise dataset.max_prompt_tokens")
            cut[ex.id] = len(ids)
            ids = short
        prompts.append((ex, ids))
    return prompts, cut


def check_context(prompts: list[tuple[Example, list[int]]], max_new: int, tree: int, limit: int | None) -> None:
    """Every prompt plus max_new_tokens plus one tree must fit the models' context `limit` (None: unknown)."""
    if not limit:
        return
    for ex, ids in prompts:
        need = len(ids) + max_new + tree + 1
        if need > limit:
            raise PromptTooLongError(
                f"prompt {ex.id!r} has {len(ids)} tokens; with sampling.max_new_tokens={max_new} and a tree of "
                f"{tree} drafted tokens it needs {need} positions, but the context is {limit}. Lower "
                "sampling.max_new_tokens, set dataset.max_prompt_tokens, shorten or drop the prompt, or choose a "
                "smaller budget.")


def decode_prompt(engine: Engine, pair: ModelPair, ex: Example, ids: list[int], rc: RunConfig,
                  draft_length: int) -> dict:
    """Generate one prompt's continuation and return its record."""
    gen = prompt_generator(rc.seed, ex.id, pair.target.device)
    cuda = pair.target.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    out = engine.generate(ids, rc.sampling.max_new_tokens, gen)
    task = rc.dataset.task
    text = pair.decode(out.new_token_ids)
    return {
        "prompt_id": ex.id, "prompt_tokens": len(ids), "new_token_ids": out.new_token_ids, "text": text,
        "new_tokens": len(out.new_token_ids), "target_calls": out.target_calls, "draft_calls": out.draft_calls,
        "tokens_verified": out.tokens_verified, "accepted_lengths": out.accepted_lengths,
        "block_efficiency": len(out.new_token_ids) / out.target_calls, "wall_s": out.wall_s,
        "time_draft_s": out.time_draft_s, "time_target_s": out.time_target_s, "time_other_s": out.time_other_s,
        "draft_length": draft_length, "score": task_score(task, text, ex.reference),
        # decode phase = after the first step; its rate counts the tokens emitted after the first step's
        "ttft_s": out.ttft_s, "decode_s": out.decode_s, "decode_tokens": out.decode_tokens,
        "decode_token_rate": out.decode_tokens / out.decode_s if out.decode_s > 0 else None,
        **({"peak_gpu_memory_gb": torch.cuda.max_memory_allocated() / 2**30} if cuda else {}),
        "expected_emitted": out.expected_emitted,
        "root_optimum": out.root_optimum, "root_acceptance": out.root_acceptance,
    }


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
    logger = make_logger(dict(rc.logger), plan)
    todo = [(ex, ids) for ex, ids in prompts if ex.id not in done]
    if done:
        print(f"[rsd] resuming {plan.run_dir}: {len(done)} of {len(prompts)} prompts already recorded", flush=True)
    tag = f"{plan.method} {shape_tag(plan.shape)}"
    use_bar = sys.stderr.isatty() or bool(os.environ.get("RSD_PROGRESS"))
    bar = tqdm(todo, desc=tag, unit="prompt", leave=False, disable=not use_bar)
    if todo:
        engine.warm_up(todo[0][1])  # untimed, its own generator: no prompt's randomness or record is touched
    for ex, ids in bar:
        record = decode_prompt(engine, pair, ex, ids, rc, drafter.draft_length)
        if ex.id in truncated:
            record["prompt_tokens_before_truncation"] = truncated[ex.id]
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
    summary = {
        "complete": True, "method": plan.method, "shape": plan.shape, "shape_tag": shape_tag(plan.shape),
        "draft_length": drafter.draft_length, "tree_size": drafter.max_tree_size,
        "budget": rc.budget.kind if drafter.draft_length else None,
        "budget_value": rc.budget.tag if drafter.draft_length else "-",
        "model_pair": rc.model_pair.name, "dataset": rc.dataset.name, "task": task,
        "sampling": dict(rc.resolved["sampling"]), "seed": rc.seed,
        "target_params": pair.target_params, "draft_params": pair.draft_params,
        **summarize_records(ordered, pair.draft_params, pair.target_params),
        "accuracy": corpus_score(task, [r["text"] for r in ordered], [ex.reference for ex, _ in prompts]),
        "run_dir": str(plan.run_dir), "config": plan.identity,
        "prompt_ids": prompt_ids, "records_sha256": file_sha256(records_path), **extra,
        # what this process spent on the run (warm-up, decoding, expected yields, scoring), for compute accounting;
        # a resumed run counts only its last part
        "elapsed_s": time.perf_counter() - started,
    }
    write_json_atomic(plan.run_dir / "summary.json", summary)
    logger.log_summary(summary)
    logger.close()
    return summary


def run(cfg: RunConfig | DictConfig | Mapping) -> list[dict]:
    """Resolve (every check before any model loads), then execute every run of `cfg`; returns the summaries of its
    runs (less any another process holds). When every run is already complete, no model or tokenizer is loaded.

    With `budget.select` at a fixed target compute, every shape first runs on the tuning prompts and only the best
    shape(s) run on the evaluation prompts (rsd.selection).
    """
    rc = resolved(cfg)  # a bad config fails here, before the dataset is read
    select = rc.select if rc.budget.kind == "fixed_compute" else None
    if select is not None and len(rc.drafter.shapes) > 1:
        examples, tuning = split_tuning(load_examples({**rc.dataset.spec, "num_prompts": None}),
                                        rc.dataset.num_prompts, select.prompts, select.offset)
        tune_rc = rc.for_tuning()
        tune_plans = plan_runs(tune_rc, run_inputs(tune_rc, tuning))
    else:
        examples, tuning, tune_plans = load_examples(rc.dataset.spec), [], []
    inputs = run_inputs(rc, examples)
    plans = plan_runs(rc, inputs)
    prompt_ids, tuning_ids = [ex.id for ex in examples], [ex.id for ex in tuning]
    tuned = [complete_summary(p.run_dir, tuning_ids, quiet=True) for p in tune_plans]
    chosen = [(p, {}) for p in plans]
    if tune_plans and all(s is not None for s in tuned):
        chosen = _selected(plans, tuned, select.top, tuning_ids)
        plans = [p for p, _ in chosen]
    finished = [complete_summary(p.run_dir, prompt_ids, quiet=True) for p in plans]
    tuning_note = f" (after {len(tune_plans)} tuning run(s) to choose them)" if tune_plans else ""
    print(f"[rsd] this job plans {len(plans)} run(s){tuning_note}; {sum(s is not None for s in tuned + finished)} "
          "already complete", flush=True)
    if all(s is not None for s in tuned + finished):
        for plan in tune_plans + plans:
            print(f"[rsd] done already, skipping: {plan.run_dir}", flush=True)
        return finished
    check_out_dir(str(rc.out_dir), must_write=True)  # only now, so that finished runs on a read-only mount are read
    if rc.num_threads:
        torch.set_num_threads(rc.num_threads)
    need_draft = any(p.make_drafter().uses_draft_model for p in plans)
    # Prompt lengths need only the tokenizer and the model configs: checked before any weights load.
    prompts, truncated = prompts_for(rc, examples + tuning)
    check_context(prompts, rc.sampling.max_new_tokens, max(p.make_drafter().max_tree_size for p in plans),
                  pair_context_length(rc.model_pair.spec, need_draft))
    prompts, tune_prompts = prompts[: len(examples)], prompts[len(examples):]
    pair = load_pair(rc.model_pair.spec, need_draft=need_draft)
    if run_inputs(rc, examples) != inputs:  # loading fetched a hub model: its revision now names the runs
        return run(rc)
    if tune_plans:  # the ranking needs every tuning run: wait for those another process holds, however long
        tune_extra = {"selection": {"role": "tune", "prompts": tuning_ids}}
        tuned = _execute_all([(p, tune_extra) for p in tune_plans], pair, tune_prompts, rc.for_tuning(), truncated,
                             math.inf)
        chosen = _selected(plans, tuned, select.top, tuning_ids)
    summaries = _execute_all(chosen, pair, prompts, rc, truncated, BUSY_WAIT_S)
    for (plan, _), summary in zip(chosen, summaries):
        if summary is None:
            print(f"[rsd] not in this job's results: {plan.run_dir} is still being run by another process (it holds "
                  f"{RunLock(plan.run_dir).path}); rerun this command once that process ends to see it here",
                  flush=True)
    return [s for s in summaries if s is not None]


def _execute_all(jobs: list[tuple[RunPlan, dict]], pair: ModelPair, prompts: list[tuple[Example, list[int]]],
                 rc: RunConfig, truncated: Mapping[str, int], wait_s: float) -> list[dict | None]:
    """Summaries of `jobs` (plan, summary extra), in order. A run another process holds is tried again once the
    others are done, then every BUSY_POLL_S for up to `wait_s` seconds (a dead holder's run is resumed here); it
    stays None only while a live process still holds it."""
    summaries = []
    for plan, extra in jobs:
        summaries.append(_execute_or_record(plan, pair, prompts, rc, truncated, extra))
        if summaries[-1] is None:
            print(f"[rsd] another process is running {plan.run_dir} (it holds {RunLock(plan.run_dir).path}); this "
                  "job does its other runs first, then tries it again", flush=True)
    deadline, announced = time.monotonic() + wait_s, False
    while True:
        for i, (plan, extra) in enumerate(jobs):
            if summaries[i] is None:
                summaries[i] = _execute_or_record(plan, pair, prompts, rc, truncated, extra)
        busy = sum(s is None for s in summaries)
        if not busy or time.monotonic() >= deadline:
            return summaries
        if not announced:
            limit = "until it ends" if math.isinf(wait_s) else f"for up to {wait_s:g} s"
            print(f"[rsd] waiting {limit} on {busy} run(s) another process holds", flush=True)
            announced = True
        time.sleep(min(BUSY_POLL_S, max(deadline - time.monotonic(), 0)))


def prompts_for(rc: RunConfig, examples: list[Example]) -> tuple[list[tuple[Example, list[int]]], dict[str, int]]:
    """`prepare_prompts` with the config's tokenizer, chat template and dataset.max_prompt_tokens: the token ids a
    run of `rc` decodes (calibration rebuilds them the same way)."""
    return prepare_prompts(examples, load_pair_tokenizer(rc.model_pair.spec), rc.model_pair.chat,
                           rc.dataset.max_prompt_tokens)


def _selected(plans: list[RunPlan], tuned: list[dict], top: int, tuning_ids: list[str]
              ) -> list[tuple[RunPlan, dict]]:
    """The plans of the best `top` shapes by their tuning runs, each with the summary entry saying how it was chosen
    (`rank` 1 = best on the tuning prompts)."""
    ranked = rank_shapes(tuned)
    rank = {s["shape_tag"]: i for i, s in enumerate(ranked, 1)}
    ranking = [{"shape_tag": s["shape_tag"], "expected_block_efficiency": s.get("expected_block_efficiency"),
                "block_efficiency": s["block_efficiency"]} for s in ranked]
    return [(p, {"selection": {"role": "eval", "prompts": tuning_ids, "rank": rank[shape_tag(p.shape)],
                               "selected_by": "expected block efficiency",
                               "candidates": len(tuned), "ranking": ranking}})
            for p in plans if rank[shape_tag(p.shape)] <= top]


def _execute_or_record(plan: RunPlan, pair: ModelPair, prompts: list[tuple[Example, list[int]]], rc: RunConfig,
                       truncated: Mapping[str, int], extra: Mapping[str, Any]) -> dict | None:
    """`execute`, leaving an error.json with the traceback in the run directory when it fails."""
    try:
        return execute(plan, pair, prompts, rc, truncated, extra)
    except StorageFullError:
        raise  # no room for an error.json either, and nothing to debug
    except Exception:
        plan.run_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(plan.run_dir / "error.json", {"config": plan.identity, "traceback": traceback.format_exc()})
        raise


def format_table(summaries: list[Mapping]) -> str:
    """A plain-text table: method, shape, block efficiency (measured and expected), MBSU, decode tokens/s, task score
    (the column named by its metric, ROUGE-L or BLEU; each cell names it when the runs mix metrics)."""
    names = sorted({metric_name(s.get("task")) for s in summaries} - {""})
    score = names[0] if len(names) == 1 else "score"
    header = (f"{'method':<10} {'shape':<12} {'budget':<6} {'BE':>6} {'E[BE]':>6} {'MBSU':>6} {'tok/s':>7} "
              f"{score:>8}")
    lines = [header, "-" * len(header)]
    for s in summaries:
        acc = f"{s['accuracy']:.1f}" if s.get("accuracy") is not None else "-"
        if len(names) > 1 and s.get("accuracy") is not None:
            acc = f"{acc} {metric_name(s.get('task'))}"
        expected = s.get("expected_block_efficiency")
        expected = f"{expected:.2f}" if expected is not None and expected == expected else "-"
        rate = s.get("decode_token_rate") or s["token_rate"]
        lines.append(f"{s['method']:<10} {s['shape_tag']:<12} {s['budget_value']:<6} {s['block_efficiency']:>6.2f} "
                     f"{expected:>6} {s['mbsu']:>6.2f} {rate:>7.1f} {acc:>8}")
    return "\n".join(lines + ["(tok/s: decode rate, tokens after the first step / seconds after it)"])


__all__ = ["RunPlan", "append_record", "execute", "format_table", "plan_runs", "prompts_for", "read_records", "run",
           "run_dir_for", "run_inputs", "to_dict", "write_json_atomic"]
