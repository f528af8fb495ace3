"""Pre-flight plan of a sweep, before anything loads or is queued:

    python -m rsd.harness.plan OVERRIDES          (the same overrides as `python run.py -m OVERRIDES`)
    python run.py OVERRIDES --plan

Prints the runs the sweep will execute (per method and budget), the models and datasets it needs and whether each is
available here (embedded, local path, cache; offline means a hub download is impossible), parameter counts (from the
cached config.json, else the paper-model table in conf/paper_models.yaml), each pair's memory in its dtype (weights
+ KV cache at the longest prompt + max_new_tokens + tree, + prefill logits) against the GPUs requested
(`hydra.launcher.gpus_per_node`) or visible, and the number of tokens to generate. Exits 1, listing every problem
with its fix, when something is missing or a pair cannot fit; the sweep's pre-flight callback
(rsd.harness.preflight) runs the same checks before Hydra launches any job.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsd.errors import RsdError
from rsd.harness.schema import Dataset, ModelPairConfig
from rsd.harness.sweep import expand_jobs
from rsd.models.source import pair_sources
from rsd.models.source_contract import ModelSource
from rsd.paths import CONF_DIR

PAPER_MODELS = CONF_DIR / "paper_models.yaml"
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
USABLE = 0.9              # share of device memory a pair may plan to use (the rest: CUDA context, activations)
ASSUMED_GPU_GB = 80.0     # per-GPU memory when no GPU is visible here (a login node); RSD_GPU_MEMORY_GB overrides
CHAT_TEMPLATE_TOKENS = 64  # bound on the tokens a chat template adds around a prompt
GB = 1e9


@dataclass
class ModelInfo:
    spec: str
    available: bool
    where: str
    params: int | None = None
    facts_from: str = "unknown"
    config: Any = None


@dataclass
class PairEstimate:
    name: str
    dtype: str
    tokens: int
    weights: float
    kv: float
    logits: float
    devices: str
    capacity: float
    gpus_needed: int | None

    @property
    def need(self) -> float:
        return self.weights + self.kv + self.logits

    @property
    def fits(self) -> bool:
        return self.need <= self.capacity


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


@contextlib.contextmanager
def fresh_hydra() -> Iterator[None]:
    """Let expand_jobs/compose initialise Hydra even inside a running Hydra app (a callback); restore it after."""
    from hydra.core.global_hydra import GlobalHydra

    gh = GlobalHydra.instance()
    saved = gh.hydra if gh.is_initialized() else None
    gh.clear()
    try:
        yield
    finally:
        GlobalHydra.instance().clear()
        if saved is not None:
            GlobalHydra.instance().initialize(saved)


def config_groups(parsed: list[Any]) -> set[str]:
    """The config groups of conf/ and of the `file://` directories a `hydra.searchpath=[...]` override adds."""
    roots = [CONF_DIR]
    for o in parsed:
        if o.key_or_group == "hydra.searchpath" and isinstance(o.value(), list):
            roots += [Path(str(p)[len("file://"):]) for p in o.value() if str(p).startswith("file://")]
    return {d.name for root in roots if root.is_dir() for d in root.iterdir() if d.is_dir()}


def compose_jobs(overrides: list[str]) -> tuple[list[list[str]], list[dict], dict]:
    """(jobs, each job's resolved config, the hydra section) for `run.py -m OVERRIDES`.

    Hydra composes once per distinct choice of config groups; a job's plain value overrides (`budget.target_tokens=6`)
    are then applied to a copy, as Hydra applies them after composing the defaults. This keeps a 150-job plan to
    seconds (a compose takes ~0.1-0.9 s).
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    parser = OverridesParser.create()
    groups = config_groups(parser.parse_overrides(overrides))
    composed: dict[tuple[str, ...], Any] = {}
    confs = []
    with fresh_hydra():
        jobs = expand_jobs(overrides)
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            full = compose(config_name="config", overrides=jobs[0] if jobs else overrides, return_hydra_config=True)
            hydra_cfg = OmegaConf.to_container(full.hydra, resolve=False)
            for job in jobs:
                parsed = parser.parse_overrides(job)
                fast = all(not o.is_delete() for o in parsed)
                selection = tuple(o.input_line for o in parsed if not fast or o.key_or_group.split("/")[0] in groups
                                  or o.key_or_group == "hydra.searchpath")  # where the groups' options are found
                if selection not in composed:
                    composed[selection] = compose(config_name="config", overrides=list(selection))
                cfg = composed[selection].copy()
                for o in parsed:  # hydra.* values shape the launch, not the job's config
                    if fast and o.key_or_group.split("/")[0] not in groups and not o.key_or_group.startswith("hydra."):
                        OmegaConf.update(cfg, o.key_or_group, o.value(), force_add=o.is_add() or o.is_force_add())
                confs.append(OmegaConf.to_container(cfg, resolve=True))
    return jobs, confs, hydra_cfg


@functools.cache
def paper_table() -> dict[str, dict]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(PAPER_MODELS)) if PAPER_MODELS.is_file() else {}


def model_config(source: ModelSource) -> tuple[Any, str]:
    """(a transformers config, where it came from) without loading weights: the source's own files, else the paper
    table; (None, 'unknown') when neither knows it."""
    config = source.config()
    if config is not None:
        return config, source.config_origin
    facts = paper_table().get(source.spec)
    if facts:
        from transformers import AutoConfig

        facts = dict(facts)
        return AutoConfig.for_model(facts.pop("model_type"), **facts), "paper table"
    return None, "unknown"


@functools.cache
def _count(config_json: str) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    data = json.loads(config_json)
    config = AutoConfig.for_model(data.pop("model_type"), **data)
    with torch.device("meta"):  # shapes only: no memory, no weights
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def count_params(config: Any) -> int:
    """Exact parameter count of an architecture (instantiated on the meta device)."""
    return _count(json.dumps(config.to_diff_dict() | {"model_type": config.model_type}, sort_keys=True, default=str))


def kv_bytes_per_token(config: Any, dtype_bytes: int) -> int:
    """Keys and values of every layer for one token."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * kv_heads * head_dim * dtype_bytes


def prompt_bound(dataset: Dataset) -> int | None:
    """An upper bound on the longest prompt's tokens for built-in and local sets (UTF-8 bytes + a chat template);
    None for hub sets (not read here)."""
    if dataset.source == "hub":
        return None
    from rsd.data import load_examples

    return max(len(ex.prompt.encode("utf-8")) for ex in load_examples(dataset)) + CHAT_TEMPLATE_TOKENS


def gpu_memory() -> tuple[int, float, str]:
    """(visible GPUs, memory per GPU in bytes, where that number comes from)."""
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if os.environ.get("RSD_GPU_MEMORY_GB"):
        return visible, float(os.environ["RSD_GPU_MEMORY_GB"]) * GB, "RSD_GPU_MEMORY_GB"
    if visible:
        return visible, min(torch.cuda.get_device_properties(i).total_memory for i in range(visible)), "visible"
    return 0, ASSUMED_GPU_GB * GB, "assumed; set RSD_GPU_MEMORY_GB"


def host_memory() -> float:
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _count_gpus(value: Any) -> int | None:
    """GPUs in a submitit value: an int, or a 'TYPE:N' / 'gpu:TYPE:N' string (SLURM's --gpus-per-node / --gres)."""
    if value is None:
        return None
    text = str(value).strip()
    if text.startswith("gpu") or ":" in text:
        text = text.rpartition(":")[2]
    return int(text) if text.isdigit() else None


RESOURCE_KEYS = ("gpus_per_node", "gpus_per_task", "tasks_per_node", "gres", "mem_gb")  # read by launcher_resources


def launcher_resources(launcher: Mapping[str, Any]) -> tuple[int | None, float | None]:
    """(GPUs per job, CPU memory per job in GB) a Hydra launcher config requests (submitit: gpus_per_node, else
    gpus_per_task x tasks_per_node, else a gres 'gpu:N'; mem_gb); None where it says nothing."""
    gpus = _count_gpus(launcher.get("gpus_per_node"))
    if gpus is None and _count_gpus(launcher.get("gpus_per_task")) is not None:
        gpus = _count_gpus(launcher["gpus_per_task"]) * int(launcher.get("tasks_per_node") or 1)
    if gpus is None and str(launcher.get("gres") or "").startswith("gpu"):
        gpus = _count_gpus(launcher["gres"])
    mem = launcher.get("mem_gb")
    return gpus, float(mem) if mem is not None else None


def estimate_pair(mp: ModelPairConfig, target: ModelInfo, draft: ModelInfo | None, prompt: int | None,
                  generated: int, gpus_requested: int | None, job_memory_gb: float | None = None
                  ) -> PairEstimate | None:
    """Memory a pair needs (weights + KV cache + prefill logits) for a prompt of `prompt` tokens (None: the full
    context) plus `generated` = max_new_tokens + tree positions, against the devices the job gets (the launcher's
    GPUs and memory when it requests them, else this machine's)."""
    if target.config is None or target.params is None:
        return None
    dtype = str(mp.dtype or "float32")
    nbytes = DTYPE_BYTES.get(dtype, 4)
    models = [target] + ([draft] if draft is not None and draft.config is not None else [])
    context = min(int(getattr(m.config, "max_position_embeddings", 0) or 1 << 30) for m in models)
    tokens = context if prompt is None else min(context, prompt + generated + 1)
    weights = sum(m.params for m in models if m.params) * nbytes
    kv = sum(kv_bytes_per_token(m.config, nbytes) for m in models) * tokens
    logits = tokens * target.config.vocab_size * 4  # the prefill's logits, made float32 by the sampling transform
    visible, per_gpu, source = gpu_memory()
    device = str(mp.device or "auto")
    n_gpus = gpus_requested if gpus_requested is not None else visible
    if device == "cpu" or n_gpus == 0:
        ram = job_memory_gb * GB if job_memory_gb is not None else host_memory()
        capacity = USABLE * ram
        devices = f"CPU RAM {ram / GB:.0f} GB" + (" (hydra.launcher.mem_gb)" if job_memory_gb is not None else "")
        needed = None
    else:
        used = n_gpus if mp.device_map else 1
        capacity = USABLE * used * per_gpu
        devices = (f"{used} of {n_gpus} GPU(s) x {per_gpu / GB:.0f} GB ({source})"
                   + ("" if mp.device_map else ", device_map=null: one GPU"))
        needed = math.ceil((weights + kv + logits) / (USABLE * per_gpu))
    return PairEstimate(mp.name, dtype, tokens, weights / GB, kv / GB, logits / GB, devices, capacity / GB,
                        needed)


def model_info(source: ModelSource) -> ModelInfo:
    ok, where = source.status()
    config, facts_from = model_config(source)
    return ModelInfo(source.spec, ok, where, count_params(config) if config is not None else None, facts_from, config)


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


def format_params(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def format_plan(plan: SweepPlan) -> str:
    """The printed plan (see the module docstring)."""
    total = sum(plan.runs.values())
    lines = [f"plan for: {' '.join(plan.overrides) or '(defaults)'}",
             f"{plan.jobs} jobs -> {total} runs (distinct result directories; AR is shared by every budget)"]
    budgets = sorted({b for _, b in plan.runs}, key=lambda b: (b == "-", len(b), b))
    methods = sorted({m for m, _ in plan.runs})
    if methods:
        lines.append("runs per method and budget:")
        lines.append("  " + f"{'method':<10}" + "".join(f"{b:>7}" for b in budgets) + f"{'total':>7}")
        for m in methods:
            row = [plan.runs.get((m, b), 0) for b in budgets]
            lines.append("  " + f"{m:<10}" + "".join(f"{n or '':>7}" for n in row) + f"{sum(row):>7}")
    lines.append("models:")
    for spec, info in plan.models.items():
        status = "available" if info.available else "MISSING"
        lines.append(f"  {status:<9} {spec:<34} {format_params(info.params):>8} params ({info.facts_from})  "
                     f"{info.where}")
    lines.append("datasets:")
    for key, (ok, how) in plan.datasets.items():
        lines.append(f"  {'available' if ok else 'MISSING':<9} {key}: {how.splitlines()[0]}")
    gpus = ("not set by the launcher" if plan.gpus_requested is None else str(plan.gpus_requested))
    lines.append(f"memory per pair (weights + KV cache + prefill logits) vs devices; GPUs per job requested: {gpus}, "
                 f"visible here: {plan.gpus_visible}:")
    for e in plan.pairs:
        lines.append(f"  {'fits' if e.fits else 'NO FIT':<9} {e.name:<16} {e.dtype:<8} weights {e.weights:7.1f} GB "
                     f"+ KV {e.kv:5.2f} GB ({e.tokens} tokens) + logits {e.logits:4.2f} GB = {e.need:7.1f} GB vs "
                     f"{e.capacity:.1f} GB usable on {e.devices}")
    tokens = f"{plan.new_tokens:,}" + (" + runs over whole datasets (num_prompts=null)" if plan.unknown_prompts else "")
    lines.append(f"token budget: at most {tokens} new tokens (runs x num_prompts x max_new_tokens; with "
                 "budget.select, every shape on its tuning prompts and the best on the evaluation prompts)")
    if plan.job_errors:
        lines.append(f"{len(plan.job_errors)} job(s) will fail on their config (the other jobs still run):")
        lines += [f"  - {e}" for e in plan.job_errors]
    if plan.problems:
        lines.append(f"REFUSED: {len(plan.problems)} problem(s); nothing was launched:")
        lines += [f"  - {p}" for p in plan.problems]
    else:
        lines.append("OK: everything needed is available and every pair fits")  # (invalid jobs aside)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the plan of `run.py -m ARGV`; 0 when every job may start, 1 when it is refused or a job's config is
    invalid, 2 for a bad command line."""
    try:
        plan = build_plan(list(sys.argv[1:] if argv is None else argv))
    except RsdError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_plan(plan))
    return 1 if plan.problems or plan.job_errors else 0


if __name__ == "__main__":
    sys.exit(main())
