"""Build a sweep's plan: every job composed and planned, what its runs need (models, datasets, memory, tokens), and
the problems that refuse the sweep."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rsd.errors import RsdError
from rsd.harness.plan.compose import compose_jobs
from rsd.harness.plan.memory import USABLE, ModelInfo, PairEstimate, estimate_pair, model_info, prompt_bound
from rsd.harness.plan.resources import gpu_memory, launcher_resources
from rsd.harness.schema import Dataset, ModelPairConfig
from rsd.models.source import pair_sources


@dataclass
class PairNeed:
    """What a sweep's jobs ask of one model pair: a draft model, the largest tree, the most new tokens and the
    longest prompt (None: unbounded)."""

    pair: ModelPairConfig
    draft: bool = False
    tree: int = 0
    max_new: int = 0
    prompt: int | None = 0


@dataclass
class SweepPlan:
    """Everything `format_plan` prints; `problems` is empty when the sweep may start."""

    overrides: list[str]
    jobs: int
    runs: Counter = field(default_factory=Counter)            # (method, budget tag) -> distinct runs
    models: dict[str, ModelInfo] = field(default_factory=dict)
    datasets: dict[str, tuple[bool, str]] = field(default_factory=dict)
    pairs: list[PairEstimate] = field(default_factory=list)
    new_tokens: int = 0
    unknown_prompts: bool = False
    gpus_requested: int | None = None
    gpus_visible: int = 0
    job_memory_gb: float | None = None  # CPU memory per job the launcher requests (hydra.launcher.mem_gb)
    problems: list[str] = field(default_factory=list)    # missing or not fitting: the whole sweep is refused
    job_errors: list[str] = field(default_factory=list)  # invalid jobs: they fail alone, the others run


def dataset_key(ds: Dataset) -> str:
    return f"{ds.name} ({ds.hub_id}, {ds.split})" if ds.source == "hub" else ds.name


SKIPPABLE = ("memory", "models", "datasets")  # the checks build_plan may be told to skip


def build_plan(overrides: list[str], launcher: Mapping[str, Any] | None = None,
               skip: frozenset[str] = frozenset()) -> SweepPlan:
    """Compose every job of the sweep, plan its runs (validation included) and check what they need: memory against
    `launcher` (the launcher config the jobs get; by default the one the overrides compose), models and datasets.
    A check named in `skip` (see SKIPPABLE) is still printed but refuses nothing."""
    from rsd.data import dataset_status
    from rsd.harness.config import RunConfig, resolve_config
    from rsd.harness.runs import plan_runs

    overrides = [o for o in overrides if o not in ("-m", "--multirun", "--plan")]
    jobs, confs, hydra_cfg = compose_jobs(overrides)
    gpus, job_memory = launcher_resources(launcher if launcher is not None else hydra_cfg.get("launcher") or {})
    plan = SweepPlan(overrides, len(jobs), gpus_requested=gpus, job_memory_gb=job_memory)
    plan.gpus_visible = gpu_memory()[0]
    seen_dirs: set[str] = set()
    pairs: dict[str, PairNeed] = {}  # per model pair: the largest draft tree, max_new_tokens and prompt bound it meets
    prompts_of: dict[str, int | None] = {}
    for job, conf in zip(jobs, confs):
        try:
            rc: RunConfig = resolve_config(conf)
            runs = plan_runs(rc)
        except RsdError as err:
            plan.job_errors.append(f"job {' '.join(job)}: {err}")
            continue
        key = dataset_key(rc.dataset)
        if key not in plan.datasets:
            plan.datasets[key] = dataset_status(rc.dataset)
            try:
                prompts_of[key] = prompt_bound(rc.dataset) if plan.datasets[key][0] else None
            except RsdError as err:
                plan.problems.append(f"dataset {key}: {err}")
                prompts_of[key] = None
        n_prompts, max_new = rc.dataset.num_prompts, rc.sampling.max_new_tokens
        select = rc.select if rc.budget.kind == "fixed_compute" else None
        tuned = select is not None and len(runs) > 1  # every shape on the tuning prompts, the best on the others
        for run in runs:
            if str(run.run_dir) in seen_dirs:
                continue  # AR runs are shared by every budget: one directory, one run
            seen_dirs.add(str(run.run_dir))
            tag = rc.budget.tag if run.make_drafter().draft_length > 0 else "-"
            plan.runs[(run.method, tag)] += 1
            if tuned:
                plan.new_tokens += select.prompts * (select.new_tokens or max_new)
            elif n_prompts is None:
                plan.unknown_prompts = True
            else:
                plan.new_tokens += n_prompts * max_new
        if tuned:
            if n_prompts is None:
                plan.unknown_prompts = True
            else:
                plan.new_tokens += min(select.top, len(runs)) * n_prompts * max_new
        need = pairs.setdefault(rc.model_pair.name, PairNeed(rc.model_pair))
        need.draft |= any(r.make_drafter().uses_draft_model for r in runs)
        need.tree = max([need.tree] + [r.make_drafter().max_tree_size for r in runs])
        need.max_new = max(need.max_new, max_new)
        bound = prompts_of.get(key)
        need.prompt = None if bound is None or need.prompt is None else max(need.prompt, bound)
    for need in pairs.values():
        mp, uses_draft = need.pair, need.draft
        sources = pair_sources(mp)
        draft = sources.draft if uses_draft and mp.draft else None
        tokenizer = [sources.tokenizer] if mp.tokenizer else []
        for source in [sources.target] + ([draft] if draft is not None else []) + tokenizer:
            if source.spec not in plan.models:
                plan.models[source.spec] = model_info(source)
        target = plan.models[sources.target.spec]
        draft_info = model_info(draft) if draft is not None else None  # a tiny draft shares the target's spec
        est = estimate_pair(mp, target, draft_info, need.prompt, need.max_new + need.tree, plan.gpus_requested,
                            plan.job_memory_gb)
        if est is not None:
            plan.pairs.append(est)
            if not est.fits and "memory" not in skip:
                fix = (f"request {est.gpus_needed} GPUs (hydra.launcher.gpus_per_node={est.gpus_needed}) with "
                       f"model_pair.device_map=auto" if est.gpus_needed else "run it on GPUs")
                plan.problems.append(f"model pair {est.name} needs {est.need:.1f} GB in {est.dtype} but gets "
                                     f"{est.capacity:.1f} GB ({est.devices}, {USABLE:.0%} usable): {fix}, or choose "
                                     "a smaller pair")
    for spec, info in plan.models.items():
        if not info.available and "models" not in skip:
            plan.problems.append(f"model {spec}: {info.where}")
    for key, (ok, how) in plan.datasets.items():
        if not ok and "datasets" not in skip:
            plan.problems.append(f"dataset {key}: {how}")
    return plan
