"""Which runs a config asks for: one per tree shape meeting the budget, each with its identity and directory.

A run's identity is the resolved config (RunConfig.identity) plus `run_inputs`: the hash of the examples it decodes
and a fingerprint of the model files. Its directory (`run_dir_for`) is readable and derived from that identity, so a
rerun of the same config finds the same directories and resumes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rsd.budgets import Budget, shape_tag
from rsd.config import RunConfig, resolve_config
from rsd.data import Example
from rsd.drafters.base import Drafter
from rsd.store import (
    examples_digest,
    identity_digest,
    join_inside,
    model_fingerprint,
)


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
