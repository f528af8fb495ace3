"""Refuse a bad config before any model loads or any file is written.

`validate_config` is the first thing `config.resolve_config` does. Each problem raises a ConfigError whose message
is one line: the key, the value, and what to do (README.md, Troubleshooting, lists them all).
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rsd.core.metrics import TASK_METRIC
from rsd.errors import ConfigError
from rsd.harness.kinds import is_int, is_number
from rsd.harness.logger import check_wandb_credentials
from rsd.harness.schema import budget_from, selection_from
from rsd.harness.validate_keys import check_known_keys, drafter_defaults
from rsd.harness.validate_pair import check_model_pair
from rsd.registry import DATASETS, LOGGERS, lookup

WANDB_MODES = ("auto", "online", "offline", "disabled")
WANDB_ENV_MODES = ("online", "offline", "disabled", "shared", "dryrun", "run")  # what wandb itself accepts
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
    check_model_pair(conf["model_pair"])
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

__all__ = ["check_out_dir", "validate_config"]
