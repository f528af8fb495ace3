"""Run a resolved config: plan the runs (validated before any model loads), decode every prompt, write results.

One config can expand into several runs (one per tree shape meeting the budget). Each run lives in a directory
derived from its identity: the resolved config, a hash of the examples it decodes and a fingerprint of the model
files (rsd.store). `records.jsonl` gets one fsync'd line per prompt; `summary.json`, written by atomic rename with a
checksum of the records, marks the run complete. A rerun skips complete runs (without loading any model when the
whole job is complete), repairs corrupt files and resumes unfinished runs; a run another process holds is left to it.
"""

from __future__ import annotations

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
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from rsd.budgets import Budget, select_shapes, shape_tag
from rsd.data import Example, load_examples
from rsd.drafters.base import Drafter
from rsd.engine import Engine
from rsd.errors import ConfigError
from rsd.logger import make_logger
from rsd.metrics import corpus_score, metric_name, summarize_records, task_score
from rsd.models.hardware import cpu_flags, resolve_dtype
from rsd.models.pairs import (
    ModelPair,
    encode_prompt,
    load_pair,
    load_pair_tokenizer,
    pair_context_length,
    text_token_ids,
)
from rsd.plugins import import_object
from rsd.sampling import SamplingParams, prompt_generator
from rsd.selection import rank_shapes, selection_config, split_tuning
from rsd.store import (
    RunLock,
    append_record,
    complete_summary,
    examples_digest,
    file_sha256,
    identity_digest,
    join_inside,
    model_fingerprint,
    read_records,
    scan_records,
    warn,
    write_json_atomic,
    write_records_atomic,
)
from rsd.validate import validate_config
from rsd.verify import verifier_for

# Keys that do not change what a run computes: excluded from the run identity (and so from its directory name).
NON_IDENTITY_KEYS = ("out_dir", "logger", "hydra")
# Budget keys that only choose which shapes run (the shape itself is in the identity): a shape run by a sweep with a
# depth limit, a pin or a higher run cap is the same run as without them.
SHAPE_FILTER_KEYS = ("max_depth", "max_runs", "shape")


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
    cls = import_object(target, "drafter _target_", "is its package installed or on PYTHONPATH?")
    if not (isinstance(cls, type) and issubclass(cls, Drafter)):
        raise ConfigError(f"drafter _target_ {target!r} is not a subclass of rsd.drafters.Drafter")
    return cls


def to_dict(cfg: DictConfig | Mapping) -> dict:
    """The resolved config as plain data, with `model_pair.dtype: auto` made concrete for this machine (so the dtype
    a run used is part of its identity: a bf16 run and a float32 run never share a directory)."""
    conf = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    pair = conf.get("model_pair")
    if isinstance(pair, dict) and pair.get("dtype") == "auto":
        conf["model_pair"] = {**pair, "dtype": resolve_dtype("auto", str(pair.get("device") or "auto"))}
    return conf


def run_inputs(cfg: Mapping[str, Any], examples: list[Example]) -> dict:
    """What a run reads besides its config: the hash of its examples and the fingerprint of its model files."""
    return {"examples_sha256": examples_digest(examples), "model_files": model_fingerprint(cfg["model_pair"])}


def run_identity(cfg: Mapping[str, Any], method: str, shape: dict, uses_draft: bool,
                 inputs: Mapping[str, Any] | None = None) -> dict:
    """The part of a resolved config that determines a run's results, with the concrete shape and `inputs`
    (`run_inputs`) filled in.

    A method without a draft (AR) does not depend on the budget, so one AR run serves every budget of a sweep.
    """
    ident = {k: v for k, v in cfg.items() if k not in NON_IDENTITY_KEYS}
    ident["drafter"] = {"name": method, "_target_": cfg["drafter"]["_target_"], "shape": shape}
    ident["budget"] = ({k: v for k, v in cfg["budget"].items() if k not in SHAPE_FILTER_KEYS} if uses_draft
                       else None)
    if inputs is not None:
        ident["inputs"] = dict(inputs)
    return ident


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


def plan_runs(cfg: DictConfig | Mapping, inputs: Mapping[str, Any] | None = None) -> list[RunPlan]:
    """Every run a config asks for; raises ConfigError (unknown drafter, infeasible budget...) before loading models.

    `inputs` (`run_inputs`: examples hash, model fingerprint) completes each run's identity and so its directory;
    without it the plans serve validation only (their directories leave out what the run reads).
    """
    conf = to_dict(cfg)
    validate_config(conf)
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
        ident = run_identity(conf, method, shape, uses_draft, inputs)
        if verifier is not None:
            ident["drafter"]["verifier"] = verifier
        plans.append(RunPlan(method, cls, shape, ident,
                             run_dir_for(Path(conf["out_dir"]), ident, budget if uses_draft else None), verifier))
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
    if max_prompt_tokens is not None and (isinstance(max_prompt_tokens, bool) or not isinstance(max_prompt_tokens, int)
                                          or max_prompt_tokens < 1):
        raise ConfigError(f"dataset.max_prompt_tokens must be a positive integer or null (no limit), got "
                          f"{max_prompt_tokens!r}")
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


def decode_prompt(engine: Engine, pair: ModelPair, ex: Example, ids: list[int], cfg: Mapping, task: str | None,
                  draft_length: int) -> dict:
    """Generate one prompt's continuation and return its record."""
    gen = prompt_generator(cfg["seed"], ex.id, pair.target.device)
    cuda = pair.target.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    out = engine.generate(ids, cfg["sampling"]["max_new_tokens"], gen)
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


def execute(plan: RunPlan, pair: ModelPair, prompts: list[tuple[Example, list[int]]], cfg: Mapping,
            truncated: Mapping[str, int] | None = None, extra: Mapping[str, Any] | None = None) -> dict | None:
    """Run (or resume, repair or skip) one planned run; returns its summary, or None if another process owns it.

    `truncated` maps the ids of prompts cut by dataset.max_prompt_tokens to their length before the cut; `extra`
    is added to the summary (how the run's shape was selected).
    """
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    with RunLock(plan.run_dir) as lock:
        if not lock.held:
            print(f"[rsd] another process is running {plan.run_dir} (it holds {lock.path}); leaving it to that "
                  "process and moving on to this job's next run", flush=True)
            return None
        return _execute_owned(plan, pair, prompts, cfg, truncated or {}, extra or {})


def _execute_owned(plan: RunPlan, pair: ModelPair, prompts: list[tuple[Example, list[int]]], cfg: Mapping,
                   truncated: Mapping[str, int], extra: Mapping[str, Any]) -> dict:
    """`execute` for the process holding the run's lock."""
    started = time.perf_counter()
    prompt_ids = [ex.id for ex, _ in prompts]
    done_summary = complete_summary(plan.run_dir, prompt_ids)
    if done_summary is not None:
        print(f"[rsd] done already, skipping: {plan.run_dir}", flush=True)
        return done_summary
    drafter = plan.make_drafter()
    params = SamplingParams(cfg["sampling"]["temperature"], cfg["sampling"]["top_k"], cfg["sampling"]["top_p"])
    engine = Engine(pair.target, pair.draft if drafter.uses_draft_model else None, drafter, params, pair.eos_token_ids,
                    pair.vocab_size)
    write_json_atomic(plan.run_dir / "run.json", {
        "config": plan.identity, "method": plan.method, "shape": plan.shape, "seed": cfg["seed"],
        "target_params": pair.target_params, "draft_params": pair.draft_params, "environment": environment()})
    records_path = plan.run_dir / "records.jsonl"
    records, problems = scan_records(records_path, prompt_ids)
    for problem in problems:
        warn(problem)
    if problems:
        write_records_atomic(records_path, records)
        print(f"[rsd] rewrote {records_path} with its {len(records)} valid records", flush=True)
    done = {r["prompt_id"] for r in records}
    task = cfg["dataset"].get("task")
    logger = make_logger(cfg.get("logger") or {}, plan)
    todo = [(ex, ids) for ex, ids in prompts if ex.id not in done]
    if done:
        print(f"[rsd] resuming {plan.run_dir}: {len(done)} of {len(prompts)} prompts already recorded", flush=True)
    tag = f"{plan.method} {shape_tag(plan.shape)}"
    use_bar = sys.stderr.isatty() or bool(os.environ.get("RSD_PROGRESS"))
    bar = tqdm(todo, desc=tag, unit="prompt", leave=False, disable=not use_bar)
    if todo:
        engine.warm_up(todo[0][1])  # untimed, its own generator: no prompt's randomness or record is touched
    for ex, ids in bar:
        record = decode_prompt(engine, pair, ex, ids, cfg, task, drafter.draft_length)
        if ex.id in truncated:
            record["prompt_tokens_before_truncation"] = truncated[ex.id]
        append_record(records_path, record)
        records.append(record)
        logger.log_prompt(len(records) - 1, record)
        running = sum(r["new_tokens"] for r in records) / sum(r["target_calls"] for r in records)
        if use_bar:
            bar.set_postfix(be=f"{running:.2f}")
        else:  # logs (SLURM, pipes): one plain line per prompt
            print(f"[rsd] {tag} seed {cfg['seed']}: prompt {ex.id} ({len(records)}/{len(prompts)}) "
                  f"{record['new_tokens']} tokens, block efficiency {record['block_efficiency']:.2f}, "
                  f"running {running:.2f}", file=sys.stderr, flush=True)
    by_id = {r["prompt_id"]: r for r in records}
    ordered = [by_id[pid] for pid in prompt_ids]
    if [r["prompt_id"] for r in records] != prompt_ids:  # a repaired file resumed out of order: store in plan order
        write_records_atomic(records_path, ordered)
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
        "prompt_ids": prompt_ids, "records_sha256": file_sha256(records_path), **extra,
        # what this process spent on the run (warm-up, decoding, expected yields, scoring), for compute accounting;
        # a resumed run counts only its last part
        "elapsed_s": time.perf_counter() - started,
    }
    write_json_atomic(plan.run_dir / "summary.json", summary)
    logger.log_summary(summary)
    logger.close()
    return summary


def run(cfg: DictConfig | Mapping) -> list[dict]:
    """Plan, validate (before any model loads), then execute every run of `cfg`; returns the summaries of its runs
    (less any another process holds). When every run is already complete, no model or tokenizer is loaded.

    With `budget.select` at a fixed target compute, every shape first runs on the tuning prompts and only the best
    shape(s) run on the evaluation prompts (rsd.selection).
    """
    conf = to_dict(cfg)
    plans = plan_runs(conf)  # a bad config fails here, before the dataset is read
    select = selection_config(conf["budget"]) if conf["budget"]["kind"] == "fixed_compute" else None
    if select is not None and len(plans) > 1:
        examples, tuning = split_tuning(load_examples({**conf["dataset"], "num_prompts": None}),
                                        conf["dataset"].get("num_prompts"), select["prompts"])
        tune_plans = plan_runs({**conf, "out_dir": str(Path(conf["out_dir"]) / "tuning")}, run_inputs(conf, tuning))
    else:
        examples, tuning, tune_plans = load_examples(conf["dataset"]), [], []
    inputs = run_inputs(conf, examples)
    plans = plan_runs(conf, inputs)
    prompt_ids, tuning_ids = [ex.id for ex in examples], [ex.id for ex in tuning]
    tuned = [complete_summary(p.run_dir, tuning_ids, quiet=True) for p in tune_plans]
    chosen = [(p, {}) for p in plans]
    if tune_plans and all(s is not None for s in tuned):
        chosen = _selected(plans, tuned, select["top"], tuning_ids)
        plans = [p for p, _ in chosen]
    finished = [complete_summary(p.run_dir, prompt_ids, quiet=True) for p in plans]
    tuning_note = f" (after {len(tune_plans)} tuning run(s) to choose them)" if tune_plans else ""
    print(f"[rsd] this job plans {len(plans)} run(s){tuning_note}; {sum(s is not None for s in tuned + finished)} "
          "already complete", flush=True)
    if all(s is not None for s in tuned + finished):
        for plan in tune_plans + plans:
            print(f"[rsd] done already, skipping: {plan.run_dir}", flush=True)
        return finished
    if conf.get("num_threads"):
        torch.set_num_threads(conf["num_threads"])
    need_draft = any(p.make_drafter().uses_draft_model for p in plans)
    pair_cfg = conf["model_pair"]
    # Prompt lengths need only the tokenizer and the model configs: checked before any weights load.
    prompts, truncated = prepare_prompts(examples + tuning, load_pair_tokenizer(pair_cfg),
                                         bool(pair_cfg.get("chat")), conf["dataset"].get("max_prompt_tokens"))
    check_context(prompts, conf["sampling"]["max_new_tokens"], max(p.make_drafter().max_tree_size for p in plans),
                  pair_context_length(pair_cfg, need_draft))
    prompts, tune_prompts = prompts[: len(examples)], prompts[len(examples):]
    pair = load_pair(pair_cfg, need_draft=need_draft)
    if run_inputs(conf, examples) != inputs:  # loading fetched a hub model: its revision now names the runs
        return run(conf)
    if tune_plans:
        tune_extra = {"selection": {"role": "tune", "prompts": tuning_ids}}
        tuned = [_execute_or_record(p, pair, tune_prompts, conf, truncated, tune_extra) for p in tune_plans]
        for i, plan in enumerate(tune_plans):  # a tuning run another process holds: wait for it, then rank
            while tuned[i] is None:
                time.sleep(2)
                tuned[i] = _execute_or_record(plan, pair, tune_prompts, conf, truncated, tune_extra)
        chosen = _selected(plans, tuned, select["top"], tuning_ids)
    summaries = [_execute_or_record(p, pair, prompts, conf, truncated, extra) for p, extra in chosen]
    return [s for s in summaries if s is not None]


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


def _execute_or_record(plan: RunPlan, pair: ModelPair, prompts: list[tuple[Example, list[int]]], cfg: Mapping,
                       truncated: Mapping[str, int], extra: Mapping[str, Any]) -> dict | None:
    """`execute`, leaving an error.json with the traceback in the run directory when it fails."""
    try:
        return execute(plan, pair, prompts, cfg, truncated, extra)
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


__all__ = ["RunPlan", "append_record", "execute", "format_table", "plan_runs", "read_records", "run", "run_dir_for",
           "run_identity", "run_inputs", "write_json_atomic"]
