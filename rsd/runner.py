"""Run a resolved config: plan the runs (validated before any model loads), decode every prompt, write results.

One config can expand into several runs (one per tree shape meeting the budget). Each run lives in a directory
derived from its resolved config; `records.jsonl` gets one fsync'd line per prompt, `summary.json` is written by
atomic rename and marks the run complete, so a re-run skips finished runs and resumes unfinished ones.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import platform
import subprocess
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from rsd.budgets import Budget, select_shapes, shape_tag
from rsd.data import Example, load_examples
from rsd.drafters.base import Drafter
from rsd.engine import Engine
from rsd.errors import ConfigError
from rsd.logger import make_logger
from rsd.metrics import corpus_score, summarize_records, task_score
from rsd.models.pairs import ModelPair, load_pair
from rsd.sampling import SamplingParams, prompt_generator
from rsd.verify import verifier_for

# Keys that do not change what a run computes: excluded from the run identity (and so from its directory name).
NON_IDENTITY_KEYS = ("out_dir", "logger", "hydra", "report")


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


def drafter_class(target: str) -> type[Drafter]:
    """Import `package.module.Class` (the drafter YAML's `_target_`) and check it is a Drafter."""
    module_name, _, cls_name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"drafter _target_ {target!r} cannot be imported ({err}); is its package installed or on "
                          "PYTHONPATH?") from None
    if not (isinstance(cls, type) and issubclass(cls, Drafter)):
        raise ConfigError(f"drafter _target_ {target!r} is not a subclass of rsd.drafters.Drafter")
    return cls


def to_dict(cfg: DictConfig | Mapping) -> dict:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)


def run_identity(cfg: Mapping[str, Any], method: str, shape: dict, uses_draft: bool) -> dict:
    """The part of a resolved config that determines a run's results, with the concrete shape filled in.

    A method without a draft (AR) does not depend on the budget, so one AR run serves every budget of a sweep.
    """
    ident = {k: v for k, v in cfg.items() if k not in NON_IDENTITY_KEYS}
    ident["drafter"] = {"name": method, "_target_": cfg["drafter"]["_target_"], "shape": shape}
    if not uses_draft:
        ident["budget"] = None
    return ident


def run_dir_for(out_dir: Path, identity: Mapping[str, Any], budget: Budget | None) -> Path:
    """A stable, readable directory: pair/dataset/sampling/budget/method-shape-seed-hash."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:10]
    s = identity["sampling"]
    sampling = f"T{s['temperature']:g}-k{s['top_k']}-p{s['top_p']:g}-n{s['max_new_tokens']}"
    leaf = f"{identity['drafter']['name']}-{shape_tag(identity['drafter']['shape'])}-s{identity['seed']}-{digest}"
    budget_tag = budget.tag if budget is not None else "no-draft"
    return out_dir / identity["model_pair"]["name"] / identity["dataset"]["name"] / sampling / budget_tag / leaf


def plan_runs(cfg: DictConfig | Mapping) -> list[RunPlan]:
    """Every run a config asks for; raises ConfigError (unknown drafter, infeasible budget...) before loading models."""
    conf = to_dict(cfg)
    drafter_cfg = dict(conf["drafter"])
    if "_target_" not in drafter_cfg or "name" not in drafter_cfg:
        raise ConfigError("the drafter config needs `_target_` (the class) and `name`; see conf/drafter/sd.yaml")
    cls = drafter_class(drafter_cfg.pop("_target_"))
    method = drafter_cfg.pop("name")
    verifier = drafter_cfg.pop("verifier", None)
    verifier = None if verifier == cls.verifier else verifier
    if verifier is not None:
        method = f"{method}+{verifier}"  # another verifier on the same trees is another method
    budget = Budget.from_config(conf["budget"])
    SamplingParams(conf["sampling"]["temperature"], conf["sampling"]["top_k"], conf["sampling"]["top_p"])
    if conf["sampling"]["max_new_tokens"] < 1:
        raise ConfigError(f"sampling.max_new_tokens must be >= 1, got {conf['sampling']['max_new_tokens']}")
    shapes = select_shapes(method, cls.shapes(budget, drafter_cfg), budget, conf["budget"].get("shape"))
    plans = []
    for shape in shapes:
        try:
            drafter = cls(**shape)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"drafter {method!r} rejects shape {shape}: {err}") from None
        uses_draft = drafter.draft_length > 0
        if verifier is not None:
            drafter.verifier = verifier
            verifier_for(drafter)  # refuse a verifier that is not exact on these trees before any model loads
        ident = run_identity(conf, method, shape, uses_draft)
        if verifier is not None:
            ident["drafter"]["verifier"] = verifier
        plans.append(RunPlan(method, cls, shape, ident,
                             run_dir_for(Path(conf["out_dir"]), ident, budget if uses_draft else None), verifier))
    return plans


def read_records(path: Path) -> list[dict]:
    """Complete records of a run; a torn last line (a crash mid-write) is cut off the file."""
    if not path.exists():
        return []
    data = path.read_bytes()
    good_end, records = 0, []
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
        good_end += len(line)
    if good_end < len(data):
        with path.open("r+b") as f:
            f.truncate(good_end)
    return records


def append_record(path: Path, record: Mapping[str, Any]) -> None:
    """Append one JSON line and make it durable before the next prompt starts."""
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write via a temporary file and rename, so readers see the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def check_context(pair: ModelPair, prompts: list[tuple[Example, list[int]]], max_new: int, tree: int) -> None:
    """Every prompt plus max_new_tokens plus one tree must fit both models' context."""
    limits = [m.context_length for m in (pair.target, pair.draft) if m is not None and m.context_length]
    if not limits:
        return
    limit = min(limits)
    for ex, ids in prompts:
        need = len(ids) + max_new + tree + 1
        if need > limit:
            raise PromptTooLongError(
                f"prompt {ex.id!r} has {len(ids)} tokens; with sampling.max_new_tokens={max_new} and a tree of "
                f"{tree} drafted tokens it needs {need} positions, but the context is {limit}. Lower "
                "sampling.max_new_tokens, shorten or drop the prompt, or choose a smaller budget.")


def decode_prompt(engine: Engine, pair: ModelPair, ex: Example, ids: list[int], cfg: Mapping, task: str | None,
                  draft_length: int) -> dict:
    """Generate one prompt's continuation and return its record."""
    gen = prompt_generator(cfg["seed"], ex.id, pair.target.device)
    out = engine.generate(ids, cfg["sampling"]["max_new_tokens"], gen)
    text = pair.decode(out.new_token_ids)
    return {
        "prompt_id": ex.id, "prompt_tokens": len(ids), "new_token_ids": out.new_token_ids, "text": text,
        "new_tokens": len(out.new_token_ids), "target_calls": out.target_calls, "draft_calls": out.draft_calls,
        "tokens_verified": out.tokens_verified, "accepted_lengths": out.accepted_lengths,
        "block_efficiency": len(out.new_token_ids) / out.target_calls, "wall_s": out.wall_s,
        "time_draft_s": out.time_draft_s, "time_target_s": out.time_target_s, "time_other_s": out.time_other_s,
        "draft_length": draft_length, "score": task_score(task, text, ex.reference),
        "expected_emitted": out.expected_emitted,
    }


def execute(plan: RunPlan, pair: ModelPair, prompts: list[tuple[Example, list[int]]], cfg: Mapping) -> dict:
    """Run (or resume, or skip) one planned run; returns its summary."""
    summary_path = plan.run_dir / "summary.json"
    if summary_path.exists():
        print(f"[rsd] done already, skipping: {plan.run_dir}")
        return json.loads(summary_path.read_text())
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    drafter = plan.make_drafter()
    params = SamplingParams(cfg["sampling"]["temperature"], cfg["sampling"]["top_k"], cfg["sampling"]["top_p"])
    engine = Engine(pair.target, pair.draft if drafter.draft_length else None, drafter, params, pair.eos_token_ids,
                    pair.vocab_size)
    write_json_atomic(plan.run_dir / "run.json", {
        "config": plan.identity, "method": plan.method, "shape": plan.shape, "seed": cfg["seed"],
        "target_params": pair.target_params, "draft_params": pair.draft_params, "environment": environment()})
    records_path = plan.run_dir / "records.jsonl"
    records = read_records(records_path)
    done = {r["prompt_id"] for r in records}
    task = cfg["dataset"].get("task")
    logger = make_logger(cfg.get("logger") or {}, plan)
    todo = [(ex, ids) for ex, ids in prompts if ex.id not in done]
    if done:
        print(f"[rsd] resuming {plan.run_dir}: {len(done)} of {len(prompts)} prompts already recorded")
    bar = tqdm(todo, desc=f"{plan.method} {shape_tag(plan.shape)}", unit="prompt", leave=False,
               disable=not sys.stderr.isatty() and not os.environ.get("RSD_PROGRESS"))
    for ex, ids in bar:
        record = decode_prompt(engine, pair, ex, ids, cfg, task, drafter.draft_length)
        append_record(records_path, record)
        records.append(record)
        logger.log_prompt(len(records) - 1, record)
        bar.set_postfix(be=f"{record['block_efficiency']:.2f}")
    by_id = {r["prompt_id"]: r for r in records}
    ordered = [by_id[ex.id] for ex, _ in prompts]
    summary = {
        "complete": True, "method": plan.method, "shape": plan.shape, "shape_tag": shape_tag(plan.shape),
        "draft_length": drafter.draft_length, "tree_size": drafter.max_tree_size,
        "budget": cfg["budget"]["kind"] if drafter.draft_length else None,
        "budget_value": Budget.from_config(cfg["budget"]).tag if drafter.draft_length else "-",
        "model_pair": cfg["model_pair"]["name"], "dataset": cfg["dataset"]["name"], "task": task,
        "sampling": cfg["sampling"], "seed": cfg["seed"],
        "target_params": pair.target_params, "draft_params": pair.draft_params,
        **summarize_records(ordered, pair.draft_params, pair.target_params),
        "accuracy": corpus_score(task, [r["text"] for r in ordered], [ex.reference for ex, _ in prompts]),
        "run_dir": str(plan.run_dir), "config": plan.identity,
    }
    write_json_atomic(summary_path, summary)
    logger.log_summary(summary)
    logger.close()
    return summary


def run(cfg: DictConfig | Mapping) -> list[dict]:
    """Plan, validate (before any model loads), then execute every run of `cfg`; returns their summaries."""
    conf = to_dict(cfg)
    plans = plan_runs(conf)
    examples = load_examples(conf["dataset"])
    if conf.get("num_threads"):
        torch.set_num_threads(conf["num_threads"])
    need_draft = any(p.make_drafter().draft_length > 0 for p in plans)
    pair = load_pair(conf["model_pair"], need_draft=need_draft)
    prompts = [(ex, pair.encode_prompt(ex.prompt)) for ex in examples]
    check_context(pair, prompts, conf["sampling"]["max_new_tokens"],
                  max(p.make_drafter().max_tree_size for p in plans))
    summaries = []
    for plan in plans:
        try:
            summaries.append(execute(plan, pair, prompts, conf))
        except Exception:
            plan.run_dir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(plan.run_dir / "error.json", {"config": plan.identity, "traceback":
                                                             traceback.format_exc()})
            raise
    return summaries


def format_table(summaries: list[Mapping]) -> str:
    """A plain-text table: method, shape, block efficiency, MBSU, tokens/s (and accuracy when known)."""
    header = f"{'method':<10} {'shape':<12} {'budget':<6} {'BE':>6} {'MBSU':>6} {'tok/s':>7} {'accuracy':>8}"
    lines = [header, "-" * len(header)]
    for s in summaries:
        acc = f"{s['accuracy']:.1f}" if s.get("accuracy") is not None else "-"
        lines.append(f"{s['method']:<10} {s['shape_tag']:<12} {s['budget_value']:<6} {s['block_efficiency']:>6.2f} "
                     f"{s['mbsu']:>6.2f} {s['token_rate']:>7.1f} {acc:>8}")
    return "\n".join(lines)


__all__ = ["RunPlan", "execute", "format_table", "plan_runs", "read_records", "run"]
