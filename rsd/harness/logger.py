"""Experiment loggers: `none` (default), `wandb` (offline unless the user has an API key, or mode says so), or a
user's class by dotted path (rsd.registry.LOGGERS), constructed as `cls(logger config, run plan)` with the typed
`logger` block (rsd.harness.schema.LoggerConfig).

A `WANDB_MODE` set in the environment always wins over `logger.mode`: a user (or a cluster's job script) who
exported WANDB_MODE=offline or disabled must never be uploaded by a config default.
"""

from __future__ import annotations

import netrc
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from rsd.harness.schema import LoggerConfig
from rsd.registry import LOGGERS, lookup


class RunInfo(Protocol):
    """What a logger needs to know about the run it logs (rsd.harness.runs.RunPlan provides it)."""

    run_dir: Path
    identity: dict
    method: str
    shape: dict


PER_PROMPT_KEYS = ("new_tokens", "target_calls", "draft_calls", "block_efficiency", "wall_s", "time_draft_s",
                   "time_target_s", "score")


class Logger(Protocol):
    """What the runner calls: once per finished prompt, once with the run's summary, then `close`."""

    def log_prompt(self, index: int, record: Mapping[str, Any]) -> None:
        """Log one prompt's record (`index`: its position in the run)."""

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        """Log the run's summary."""

    def close(self) -> None:
        """Flush and release whatever the logger holds."""


class NullLogger:
    """Logs nothing and writes nothing."""

    def __init__(self, cfg: LoggerConfig, plan: RunInfo) -> None:
        return None

    def log_prompt(self, index: int, record: Mapping[str, Any]) -> None:
        return None

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        return None

    def close(self) -> None:
        return None


def has_wandb_key() -> bool:
    """True if WANDB_API_KEY is set or ~/.netrc holds a key for api.wandb.ai."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_mode(configured: str | None) -> str:
    """The wandb mode to use: $WANDB_MODE when set, else `logger.mode`, where auto means online only with a key."""
    env = os.environ.get("WANDB_MODE")
    if env:
        return env
    if configured in (None, "auto"):
        return "online" if has_wandb_key() else "offline"
    return configured


def check_wandb_credentials(mode: str | None) -> None:
    """Refuse (ConfigError) a wandb logger in `logger.mode` that would run online without an API key, before the run
    starts."""
    if wandb_mode(mode) != "online" or has_wandb_key():
        return
    from rsd.errors import ConfigError

    source = "WANDB_MODE=online" if os.environ.get("WANDB_MODE") else f"logger.mode={mode}"
    raise ConfigError(f"{source} needs a W&B API key and none is set (WANDB_API_KEY or `wandb login`): log in, or "
                      "use logger.mode=offline (sync later with `wandb sync`)")


class WandbLogger:
    """One wandb run per harness run: the resolved config, per-prompt metrics, and the summary."""

    def __init__(self, cfg: LoggerConfig, plan: RunInfo) -> None:
        import wandb

        self.wandb = wandb
        self.run = wandb.init(
            project=cfg.project, entity=cfg.entity, mode=wandb_mode(cfg.mode), dir=str(plan.run_dir),
            name=plan.run_dir.name, group=cfg.group, tags=list(cfg.tags or []),
            config={**plan.identity, "method": plan.method, "shape": plan.shape}, reinit="finish_previous",
        )

    def log_prompt(self, index: int, record: Mapping[str, Any]) -> None:
        self.run.log({f"prompt/{k}": record[k] for k in PER_PROMPT_KEYS if record.get(k) is not None},
                     step=index)

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        for k, v in summary.items():
            if isinstance(v, (int, float, str)) or v is None:
                self.run.summary[k] = v

    def close(self) -> None:
        self.run.finish()


def make_logger(cfg: LoggerConfig, plan: RunInfo) -> Logger:
    """The logger `cfg.name` names (rsd.registry.LOGGERS), for the run `plan`."""
    return lookup(LOGGERS, cfg.name)(cfg, plan)
