"""Run a resolved config: plan its runs (runs, every check before any model loads), prepare the prompts (prompts),
choose shapes on tuning prompts where asked (selection), then execute each run (execute); all in rsd.harness.

A rerun skips complete runs (without loading any model, and without writing anything, when the whole job is
complete) and resumes unfinished ones. A run another process holds is tried again after this job's other runs (taken
over if its holder died) and, while still held, for a bounded time; a run left to a live holder is named at the end.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from rsd.core.budgets import shape_tag
from rsd.core.metrics import metric_name
from rsd.data import Example, load_examples
from rsd.harness.config import RunConfig, Selection
from rsd.harness.execute import execute
from rsd.harness.files import RunLock, StorageFullError, write_json_atomic
from rsd.harness.prompts import check_context, prepare_prompts
from rsd.harness.runs import RunPlan, plan_runs, run_inputs
from rsd.harness.selection import SELECTED_BY, prompt_mean_score, rank_shapes, split_tuning
from rsd.harness.store import check_run_files, complete_summary, scan_records
from rsd.harness.validate import check_out_dir
from rsd.models.pairs import ModelPair, load_pair, load_pair_tokenizer, pair_context_length

# A job whose run another process holds tries it once more after its own runs, then every BUSY_POLL_S for up to
# BUSY_WAIT_S. The retry alone takes over from a holder that died (its flock died with it); a live holder keeps its
# run, and waiting for it would only idle this worker: two sweeps sharing an out_dir take one-run jobs in turn, so
# each would wait at every job the other holds (60 s waits idled 16 of 60 worker-minutes of the second study). A
# fixed-compute job waits, however long, for the tuning runs its ranking needs.
BUSY_POLL_S = 2.0
BUSY_WAIT_S = 0.0


@dataclass
class _Job:
    """A config's runs, planned against what they read (`inputs`), and which of them are complete already."""

    examples: list[Example]
    tuning: list[Example]
    inputs: dict
    plans: list[RunPlan]  # every shape's evaluation run
    tune_plans: list[RunPlan]
    tuned: list[dict | None]  # the complete summary of each tuning run, None where it is not complete
    chosen: list[tuple[RunPlan, dict]]  # the evaluation runs to do (the selected ones once tuning is complete),
    #                                     each with its summary extra (how it was selected)
    finished: list[dict | None]  # the complete summary of each chosen run, None where it is not complete

    @property
    def complete(self) -> bool:
        """Every tuning and chosen evaluation run is complete."""
        return all(s is not None for s in self.tuned + self.finished)

    @property
    def tuning_ids(self) -> list[str]:
        return [ex.id for ex in self.tuning]


def _plan_job(rc: RunConfig, examples: list[Example], tuning: list[Example] | None) -> _Job:
    """Plan the runs of `rc` on `examples` (and, unless `tuning` is None, its tuning runs on `tuning`), selecting
    shapes when every tuning run is complete already; reads run directories, writes nothing."""
    inputs = run_inputs(rc, examples)
    plans = plan_runs(rc, inputs)
    tune_plans = [] if tuning is None else plan_runs(rc.for_tuning(), run_inputs(rc.for_tuning(), tuning))
    tuning = tuning or []
    for plan in tune_plans + plans:
        check_run_files(plan.run_dir)  # a directory where summary.json belongs: one line now, not an OS error later
    tuning_ids, prompt_ids = [ex.id for ex in tuning], [ex.id for ex in examples]
    tuned = [complete_summary(p.run_dir, tuning_ids, quiet=True) for p in tune_plans]
    chosen = [(p, {}) for p in plans]
    if tune_plans and all(s is not None for s in tuned):
        chosen = _selected(plans, tuned, tune_plans, rc.select, tuning_ids)
    finished = [complete_summary(p.run_dir, prompt_ids, quiet=True) for p, _ in chosen]
    return _Job(examples, tuning, inputs, plans, tune_plans, tuned, chosen, finished)


def _report_complete(job: _Job) -> list[dict]:
    for plan in job.tune_plans + [p for p, _ in job.chosen]:
        print(f"[rsd] done already, skipping: {plan.run_dir}", flush=True)
    return job.finished


def run(rc: RunConfig) -> list[dict]:
    """Execute every run of a resolved config (rsd.harness.config.resolve_config: every check before any model loads);
    returns the summaries of its runs (less any another process holds). When every run is already complete, no
    model or tokenizer is loaded.

    With `budget.select` at a fixed target compute, every shape first runs on the tuning prompts and only the best
    shape(s) run on the evaluation prompts (rsd.harness.selection).
    """
    select = rc.select if rc.budget.kind == "fixed_compute" else None
    if select is not None and len(rc.drafter.shapes) > 1:
        examples, tuning = split_tuning(load_examples(replace(rc.dataset, num_prompts=None)),
                                        rc.dataset.num_prompts, select.prompts, select.offset)
    else:
        examples, tuning = load_examples(rc.dataset), None
    job = _plan_job(rc, examples, tuning)
    tuning_note = f" (after {len(job.tune_plans)} tuning run(s) to choose them)" if job.tune_plans else ""
    print(f"[rsd] this job plans {len(job.chosen)} run(s){tuning_note}; "
          f"{sum(s is not None for s in job.tuned + job.finished)} already complete",
          flush=True)
    if job.complete:
        return _report_complete(job)
    check_out_dir(str(rc.out_dir), must_write=True)  # only now, so that finished runs on a read-only mount are read
    if rc.num_threads:
        torch.set_num_threads(rc.num_threads)
    drafters = [p.make_drafter() for p, _ in job.chosen]
    need_draft = any(d.uses_draft_model for d in drafters)
    # Prompt lengths need only the tokenizer and the model configs: checked before any weights load.
    prompts, truncated = prompts_for(rc, examples + job.tuning)
    check_context(prompts, rc.sampling.max_new_tokens, max(d.max_tree_size for d in drafters),
                  pair_context_length(rc.model_pair, need_draft))
    prompts, tune_prompts = prompts[: len(examples)], prompts[len(examples):]
    pair = load_pair(rc.model_pair, need_draft=need_draft)
    if run_inputs(rc, examples) != job.inputs:  # loading fetched a hub model: its revision now names the runs
        job = _plan_job(rc, examples, tuning)
        if job.complete:
            return _report_complete(job)
    chosen = job.chosen
    if job.tune_plans:  # the ranking needs every tuning run: wait for those another process holds, however long
        tune_extra = {"selection": {"role": "tune", "prompts": job.tuning_ids}}
        tuned = _execute_all([(p, tune_extra) for p in job.tune_plans], pair, tune_prompts, rc.for_tuning(),
                             truncated, math.inf)
        chosen = _selected(job.plans, tuned, job.tune_plans, select, job.tuning_ids)
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
    return prepare_prompts(examples, load_pair_tokenizer(rc.model_pair), rc.model_pair.chat,
                           rc.dataset.max_prompt_tokens)


def _selected(plans: list[RunPlan], tuned: list[dict], tune_plans: list[RunPlan], select: Selection,
              tuning_ids: list[str]) -> list[tuple[RunPlan, dict]]:
    """The plans of the best `select.top` shapes by their tuning runs (`tuned`, the summaries of `tune_plans`) ranked
    by `select.by`, each with the summary entry saying how it was chosen (`rank` 1 = best on the tuning prompts)."""
    scores = None
    if select.by == "prompt_mean":
        scores = {s["shape_tag"]: prompt_mean_score(scan_records(p.run_dir / "records.jsonl")[0])
                  for s, p in zip(tuned, tune_plans)}
    ranked = rank_shapes(tuned, scores)
    rank = {s["shape_tag"]: i for i, s in enumerate(ranked, 1)}
    ranking = [{"shape_tag": s["shape_tag"], "expected_block_efficiency": s.get("expected_block_efficiency"),
                "block_efficiency": s["block_efficiency"],
                **({"prompt_mean": scores[s["shape_tag"]]} if scores else {})} for s in ranked]
    return [(p, {"selection": {"role": "eval", "prompts": tuning_ids, "rank": rank[shape_tag(p.shape)],
                               "selected_by": SELECTED_BY[select.by],
                               "candidates": len(tuned), "ranking": ranking}})
            for p in plans if rank[shape_tag(p.shape)] <= select.top]


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
