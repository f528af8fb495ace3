"""Refuse a bad config before any model loads or any file is written.

`validate_config` is the first thing `config.resolve_config` does. Each problem raises a ConfigError whose message
is one line: the key, the value, and what to do (README.md, Troubleshooting, lists them all).
"""

from __future__ import annotations

import difflib
import errno
import functools
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from rsd.core.metrics import TASK_METRIC
from rsd.errors import ConfigError
from rsd.harness.kinds import is_int, is_number
from rsd.harness.logger import check_wandb_credentials
from rsd.harness.schema import Tiny, budget_from, from_dict, selection_from
from rsd.models.source import draft_source, model_source
from rsd.models.spec import STATIC_MODES
from rsd.paths import CONF_DIR
from rsd.registry import DATASETS, LOGGERS, TINY_MODELS, lookup

DTYPES = ("float32", "float16", "bfloat16", "float64")
WANDB_MODES = ("auto", "online", "offline", "disabled")
WANDB_ENV_MODES = ("online", "offline", "disabled", "shared", "dryrun", "run")  # what wandb itself accepts
# Keys every drafter accepts, whatever its YAML declares (the verifier plug-in: docs/adding_a_drafter.md §4).
DRAFTER_KEYS = ("_target_", "name", "verifier")
TINY_DTYPE = "float32"  # the tiny pairs are built in float32 whatever model_pair.dtype says
BYTE_VOCAB = 258  # the tiny pairs' byte tokenizer: 256 bytes, BOS and EOS
# model_pair.attn_implementation: what transformers accepts (flash attention only on a GPU with its package)
ATTENTION = ("sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention")
# The smallest positive temperature: dividing logits by less overflows float32 into NaN (1e-300 did); 0 is greedy.
MIN_TEMPERATURE = 1e-3
# torch threads per CPU core beyond which a run only slows down (num_threads=100000 was a MemoryError)
THREADS_PER_CORE = 4
SELECT_KEYS = ("prompts", "top", "offset", "new_tokens", "by")


def validate_config(conf: dict) -> None:
    """Raise ConfigError for the first invalid or silently ignored setting of a resolved config (see module doc)."""
    check_known_keys(conf)
    _check_run(conf)
    _check_sampling(conf["sampling"])
    _check_dataset(conf["dataset"])
    _check_budget(conf["budget"])
    _check_model_pair(conf["model_pair"])
    _check_drafter(conf.get("drafter") or {})
    _check_logger(conf.get("logger") or {})
    check_out_dir(conf["out_dir"])


def _check_run(conf: Mapping[str, Any]) -> None:
    if not is_int(conf.get("seed")):
        raise ConfigError(f"seed={conf.get('seed')!r} must be an integer (it seeds every prompt's randomness), "
                          "e.g. seed=0")
    threads = conf.get("num_threads")
    if threads is not None and not (is_int(threads) and threads >= 1):
        raise ConfigError(f"num_threads={threads!r} must be a positive integer (torch threads) or null for torch's "
                          "default")
    if threads is not None and threads > THREADS_PER_CORE * (os.cpu_count() or 1):
        raise ConfigError(f"num_threads={threads} is more than {THREADS_PER_CORE} torch threads per CPU core of this "
                          "machine, which only slows a run down; use at most the core count, or null for torch's "
                          "default")


def _check_sampling(s: Mapping[str, Any]) -> None:
    t = s.get("temperature")
    if not (is_number(t, finite=True) and t >= 0):
        raise ConfigError(f"sampling.temperature={t!r} must be a finite number >= 0 (0 is greedy, 1 samples the "
                          "model's own distribution)")
    if 0 < t < MIN_TEMPERATURE:
        raise ConfigError(f"sampling.temperature={t!r} is below {MIN_TEMPERATURE:g}, where logits / T overflow; use "
                          "sampling.temperature=0 for greedy decoding")
    k = s.get("top_k")
    if not (is_int(k) and k >= 0):
        raise ConfigError(f"sampling.top_k={k!r} must be an integer >= 0 (0 disables top-k)")
    p = s.get("top_p")
    if not (is_number(p, finite=True) and 0 < p <= 1):
        raise ConfigError(f"sampling.top_p={p!r} must be a number in (0, 1] (1 disables top-p)")
    n = s.get("max_new_tokens")
    if not (is_int(n) and n >= 1):
        raise ConfigError(f"sampling.max_new_tokens={n!r} must be a positive integer")


def _check_dataset(d: Mapping[str, Any]) -> None:
    n = d.get("num_prompts")
    if n is not None and not (is_int(n) and n >= 1):
        raise ConfigError(f"dataset.num_prompts={n!r} must be a positive integer, or null for every prompt of the "
                          "set")
    cap = d.get("max_prompt_tokens")
    if cap is not None and not (is_int(cap) and cap >= 1):
        raise ConfigError(f"dataset.max_prompt_tokens must be a positive integer (tokens kept of a longer prompt) or "
                          f"null for no limit, got {cap!r}")
    seed = d.get("shuffle_seed")
    if seed is not None and not is_int(seed):
        raise ConfigError(f"dataset.shuffle_seed={seed!r} must be an integer (a reproducible random choice of "
                          "prompts) or null for the file's order")
    if d.get("source", "builtin") == "builtin":
        lookup(DATASETS, d.get("name"))
    task = d.get("task")
    if task is not None and task not in TASK_METRIC:
        raise ConfigError(f"dataset.task={task!r} is not a task rsd can score; use "
                          f"{', '.join(sorted(TASK_METRIC))}, or null to skip scoring")


def _check_budget(b: Mapping[str, Any]) -> None:
    budget_from(b)
    shape = b.get("shape")
    if shape is not None and not isinstance(shape, Mapping):
        raise ConfigError(f"budget.shape={shape!r} must be a mapping of shape keys, e.g. "
                          "budget=fixed_compute 'budget.shape={num_sequences:2}'")
    select = b.get("select")
    if select is not None and not (isinstance(select, Mapping) and set(select) <= set(SELECT_KEYS)):
        raise ConfigError(f"budget.select={select!r} must be null or a mapping with prompts (tuning prompts), "
                          "top (shapes kept) and optionally offset, new_tokens and by, "
                          "e.g. 'budget.select={prompts:4,top:1}'")
    selection_from(b)


def _check_tiny(m: Mapping[str, Any]) -> None:
    target, dtype = m["target"], m.get("dtype")
    if dtype not in (None, TINY_DTYPE):
        raise ConfigError(f"model_pair.dtype={dtype!r} is ignored by the tiny pair {target!r}, which is built in "
                          f"{TINY_DTYPE}: drop the override")
    tiny = m.get("tiny") or {}
    vocab, seed, std = tiny.get("vocab_size", BYTE_VOCAB), tiny.get("seed", 0), tiny.get("init_std", 0.02)
    if not (is_int(vocab) and vocab >= BYTE_VOCAB):
        raise ConfigError(f"model_pair.tiny.vocab_size={vocab!r} must be an integer >= {BYTE_VOCAB} (the byte "
                          "tokenizer's tokens)")
    if not is_int(seed):
        raise ConfigError(f"model_pair.tiny.seed={seed!r} must be an integer (it seeds the random weights)")
    if not (is_number(std, finite=True) and 0 < std <= 1):
        raise ConfigError(f"model_pair.tiny.init_std={std!r} must be a number in (0, 1] (the random weights' std; "
                          "transformers refuses more than 1), e.g. 0.02")


def _check_model_pair(m: Mapping[str, Any]) -> None:
    target, draft, tokenizer = m.get("target"), m.get("draft"), m.get("tokenizer")
    if is_built(target):
        lookup(TINY_MODELS, target)
        if draft not in (None, target):
            raise ConfigError(f"model_pair.draft={draft!r} is ignored by the tiny pair {target!r}, which builds its "
                              "own draft: drop the override, or set model_pair.target to a real model too")
        if tokenizer is not None:
            raise ConfigError(f"model_pair.tokenizer={tokenizer!r} is ignored by the tiny pair {target!r}, which uses "
                              "a byte tokenizer: drop the override")
        _check_tiny(m)
    elif is_built(draft):
        raise ConfigError(f"model_pair.draft={draft!r} is a tiny model, which pairs only with a tiny target: use "
                          "model_pair=tiny_llama or model_pair=tiny_opt")
    for key, spec in (("target", target), ("draft", draft), ("tokenizer", tokenizer)):
        if isinstance(spec, str):
            model_source(spec).check(key)
    attn = m.get("attn_implementation")
    if attn is not None and attn not in ATTENTION:
        raise ConfigError(f"model_pair.attn_implementation={attn!r} is not an attention rsd runs; use "
                          f"{', '.join(ATTENTION)}, or null for sdpa (flash attention needs a GPU and its package)")
    dtype = m.get("dtype")
    if dtype is not None and dtype != "auto" and dtype not in DTYPES:
        raise ConfigError(f"model_pair.dtype={dtype!r} is not a dtype rsd loads models in; use "
                          f"{', '.join(DTYPES)} (float16/bfloat16 on GPUs), or auto (bfloat16 where this machine "
                          "runs it fast)")
    static = m.get("static_forward")
    if static is not None and static not in STATIC_MODES[1:]:
        raise ConfigError(f"model_pair.static_forward={static!r} is not a static-shape forward mode; use null (eager "
                          f"forwards), {' or '.join(STATIC_MODES[1:])} (benchmarks/README.md, static_compile.py)")
    mix = m.get("mix")
    if mix is not None and not (is_number(mix, finite=True) and 0 <= mix <= 1):
        raise ConfigError(f"model_pair.mix={mix!r} must be a number in [0, 1] (the acceptance dial: 0 drafts from "
                          "the draft, 1 from the target), or null for the plain pair")
    _check_draft_kind(m)
    if mix is not None and not draft:
        raise ConfigError(f"model_pair.mix={mix!r} mixes the draft's logits with the target's, but the pair names no "
                          "draft model")
    _check_device(m.get("device"))


def _check_draft_kind(m: Mapping[str, Any]) -> None:
    """model_pair.draft_kind: lm (a standalone draft) or feature_head (a head over the target's hidden states), and a
    head that fits its target (read from the two configs, before any model loads)."""
    kind = m.get("draft_kind", "lm")
    if kind not in ("lm", "feature_head"):
        raise ConfigError(f"model_pair.draft_kind={kind!r} is not a draft kind; use lm (a standalone draft model) or "
                          "feature_head (an EAGLE-style head over the target's hidden states)")
    if kind != "feature_head":
        return
    for key in ("mix", "static_forward"):
        if m.get(key) is not None:
            raise ConfigError(f"model_pair.{key}={m.get(key)!r} is not supported with draft_kind=feature_head (the "
                              "head reads the target's hidden states from eager forwards): set model_pair."
                              f"{key} to null")
    draft, target = m.get("draft"), m.get("target")
    target_source = model_source(str(target), from_dict(Tiny, m["tiny"], "model_pair.tiny") if m.get("tiny") else None)
    head = draft_source(target_source, str(draft), "feature_head")
    if head.missing():
        raise ConfigError(f"model_pair.draft={draft!r} holds no feature_head.json, but model_pair.draft_kind is "
                          "feature_head: point it at a head trained by experiments/train_feature_head.py, or set "
                          "draft_kind to lm")
    problem = head.fit_problem(target_source)  # read without converting or downloading anything
    if problem:
        raise ConfigError(f"model_pair.draft={draft!r} does not fit the target {target!r}: {problem}; train a head "
                          "for this target (experiments/train_feature_head.py)")


def is_built(spec: Any) -> bool:
    """Whether a model_pair value names a model built from a config (a tiny pair's), not files."""
    return isinstance(spec, str) and model_source(spec).built


def _check_device(device: Any) -> None:
    if device in (None, "auto"):
        return
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"model_pair.device={device!r} is not a torch device; use auto, cpu, cuda or cuda:N") \
            from None
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise ConfigError(f"model_pair.device={device!r} but torch sees no CUDA device on this machine; use "
                              "model_pair.device=auto (CUDA when there is one, else the CPU) or cpu")
        if dev.index is not None and dev.index >= n:
            raise ConfigError(f"model_pair.device={device!r} but torch sees {n} CUDA device(s): use cuda:0 to "
                              f"cuda:{n - 1}, or auto")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"model_pair.device={device!r} but MPS is not available here; use model_pair.device=auto")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"model_pair.device={device!r} is not supported; use auto, cpu, cuda or cuda:N")


def _check_drafter(d: Mapping[str, Any]) -> None:
    for key in ("_target_", "name"):
        if not (isinstance(d.get(key), str) and d[key]):
            raise ConfigError(f"drafter.{key}={d.get(key)!r}: the drafter config needs `_target_` (the class) and "
                              "`name`; see conf/drafter/sd.yaml")
    defaults = drafter_defaults().get(d["_target_"], {})
    for key, value in d.items():
        if is_int(defaults.get(key)) and not is_int(value):
            raise ConfigError(f"drafter.{key}={value!r} must be an integer, like its default {defaults[key]} "
                              "(not a bool, a fraction or a quoted number)")


@functools.cache
def drafter_defaults(conf_dir: Path = CONF_DIR) -> dict[str, dict[str, Any]]:
    """{drafter `_target_`: its keys' values in conf/drafter/*.yaml}: the types a built-in drafter's keys take."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted((conf_dir / "drafter").glob("*.yaml")):
        node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        out.setdefault(str(node.get("_target_")), {}).update(node)
    return out


def _check_logger(lg: Mapping[str, Any]) -> None:
    name = lg.get("name", "none")
    lookup(LOGGERS, name)
    if name != "wandb":
        return
    mode = lg.get("mode", "auto")
    if mode not in WANDB_MODES:
        raise ConfigError(f"logger.mode={mode!r} must be one of {', '.join(WANDB_MODES)} (the WANDB_MODE environment "
                          "variable, when set, takes precedence)")
    env = os.environ.get("WANDB_MODE")
    if env and env not in WANDB_ENV_MODES:
        raise ConfigError(f"the environment variable WANDB_MODE={env!r} is not a wandb mode: set it to online, "
                          "offline or disabled, or unset it to use logger.mode")
    check_wandb_credentials(mode)


def check_out_dir(out_dir: Any, key: str = "out_dir", must_write: bool = False) -> None:
    """`out_dir` (or the directory named by `key`) must be a directory, or creatable. It must be writable (checked by
    creating and removing a probe) when it does not exist yet or `must_write`: an existing one may be read-only, as
    long as every run the job plans is complete there (the runner checks again before it writes)."""
    if not isinstance(out_dir, str) or not out_dir.strip():
        raise ConfigError(f"{key}={out_dir!r} must be a directory path, e.g. out_dir=results")
    path = Path(out_dir).expanduser().absolute()
    for part in (path, *path.parents):
        if part.is_symlink() and not part.exists():  # dangling, or a loop: creating the directory would fail
            try:
                os.stat(part)
                why = "an unusable symbolic link"
            except OSError as err:
                why = ("a symbolic link loop" if err.errno == errno.ELOOP
                       else f"a symbolic link to {os.readlink(part)}, which does not exist")
            where = f"is {why}" if part == path else f"cannot be created: {part} is {why}"
            raise ConfigError(f"{key}={out_dir!r} {where}; point {key} at a directory, or replace the link "
                              f"(rm {part})")
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        where = "is a file" if existing == path else f"cannot be created: {existing} is a file"
        raise ConfigError(f"{key}={out_dir!r} {where}, not a directory; choose another out_dir (results go in a "
                          "directory tree below it)")
    if existing == path and not must_write:
        return
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".rsd-write-check-", dir=existing))
    except OSError:
        todo = " and this job has runs to do (finished runs alone are only read)" if must_write else ""
        raise ConfigError(f"{key}={out_dir!r} is not writable (cannot create files in {existing}){todo}; choose a "
                          "directory you can write to") from None


# ---- keys added with `+` that no config group defines -------------------------------------------------------------


def _schema_of(node: Any) -> dict | None:
    """The key tree of a YAML node: a dict of sub-schemas for a mapping, None (any value) for anything else."""
    return {str(k): _schema_of(v) for k, v in node.items()} if isinstance(node, Mapping) else None


def _merge(schema: dict, other: dict) -> None:
    for key, sub in other.items():
        if key not in schema:
            schema[key] = sub
        elif isinstance(schema[key], dict) and isinstance(sub, dict):
            _merge(schema[key], sub)
        else:
            schema[key] = None  # a mapping in one option, a plain value in another: accept any value


@functools.cache
def known_keys(conf_dir: Path = CONF_DIR) -> tuple[dict, dict[str, frozenset[str]], dict[str, tuple[str, ...]]]:
    """(key tree of every config group, presets and config.yaml; drafter keys per `_target_`; drafter options per
    drafter key)."""
    schema: dict = {}
    drafters: dict[str, set[str]] = {}
    takers: dict[str, list[str]] = {}
    for group in sorted(p for p in conf_dir.iterdir() if p.is_dir() and p.name not in ("hydra", "experiment")):
        schema[group.name] = {}
        for path in sorted(group.glob("*.yaml")):
            node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
            if group.name == "drafter":
                drafters.setdefault(str(node.get("_target_")), set(DRAFTER_KEYS)).update(map(str, node))
                for key in node:
                    takers.setdefault(str(key), []).append(path.stem)
            else:
                _merge(schema[group.name], _schema_of(node) or {})
    for path in [conf_dir / "config.yaml", *sorted((conf_dir / "experiment").glob("*.yaml"))]:
        node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        _merge(schema, _schema_of({k: v for k, v in node.items() if k not in ("defaults", "hydra", "drafter")}))
    schema["drafter"] = None  # checked per drafter class below
    return schema, {t: frozenset(keys) for t, keys in drafters.items()}, {k: tuple(v) for k, v in takers.items()}


def check_known_keys(conf: Mapping[str, Any]) -> None:
    """Refuse a key no config group defines (a typo added with `+`), suggesting the closest known key."""
    schema, drafters, takers = known_keys()
    _walk(conf, schema, "", schema)
    drafter = conf.get("drafter") or {}
    allowed = drafters.get(str(drafter.get("_target_")))
    if allowed is None:
        return  # a user's drafter (hydra.searchpath): its YAML is the only schema, and rsd does not see it
    for key in drafter:
        if key not in allowed:
            others = ", ".join(f"drafter={name}" for name in takers.get(key, ()))
            raise _unknown(f"drafter.{key}", sorted(allowed), schema, f"drafter {drafter.get('name')!r} takes",
                           f"; {key} is a key of {others}" if others else "")


def _walk(node: Mapping[str, Any], schema: dict, prefix: str, root: dict) -> None:
    for key, value in node.items():
        if not prefix and key == "hydra":
            continue
        if key not in schema:
            raise _unknown(prefix + key, sorted(schema), root, f"{prefix.rstrip('.') or 'top-level'} keys:")
        if isinstance(schema[key], dict) and isinstance(value, Mapping):
            _walk(value, schema[key], f"{prefix}{key}.", root)


def _dotted(schema: dict, prefix: str = "") -> list[str]:
    out = []
    for key, sub in schema.items():
        out.append(prefix + key)
        if isinstance(sub, dict):
            out += _dotted(sub, f"{prefix}{key}.")
    return out


def _unknown(path: str, siblings: list[str], root: dict, listing: str, hint: str = "") -> ConfigError:
    leaf = path.rsplit(".", 1)[-1]
    parent = path[: -len(leaf)]
    # the same key in another group first (dataset.temperature -> sampling.temperature), else the closest sibling
    elsewhere = [k for k in _dotted(root) if k.rsplit(".", 1)[-1] == leaf and k != path]
    close = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.6)
    guess = elsewhere[0] if elsewhere else parent + close[0] if close else None
    return ConfigError(f"unknown config key {path}" + (f"; did you mean {guess}?" if guess else ";")
                       + f" {listing} {', '.join(siblings)}{hint} (a key added with + must be one the config "
                       "defines)")


__all__ = ["check_known_keys", "check_out_dir", "drafter_defaults", "known_keys",
           "validate_config"]
