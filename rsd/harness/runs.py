"""Which runs a config asks for: one per tree shape meeting the budget, each with its identity and directory.

A run's identity is the resolved config (RunConfig.identity) plus `run_inputs`: the hash of the examples it decodes
and a fingerprint of the model files. Its directory (rsd.harness.config.run_dir_for) is readable and derived from that
identity, so a rerun of the same config finds the same directories and resumes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsd.data import Example
from rsd.drafters.base import Drafter
from rsd.harness.config import RunConfig, run_dir_for
from rsd.harness.identity import examples_digest, model_fingerprint


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


def run_inputs(rc: RunConfig, examples: list[Example]) -> dict:
    """What a run reads besides its config: the hash of its examples and the fingerprint of its model files."""
    return {"examples_sha256": examples_digest(examples), "model_files": model_fingerprint(rc.model_pair)}


def plan_runs(rc: RunConfig, inputs: Mapping[str, Any] | None = None) -> list[RunPlan]:
    """Every run a resolved config asks for (rsd.harness.config.resolve_config made every check already).

    `inputs` (`run_inputs`: examples hash, model fingerprint) completes each run's identity and so its directory;
    without it the plans serve validation only (their directories leave out what the run reads).
    """
    plans = []
    for shape in rc.drafter.shapes:
        uses_draft = rc.drafter.make(shape).draft_length > 0
        ident = rc.identity(shape, uses_draft, inputs)
        plans.append(RunPlan(rc.drafter.method, rc.drafter.cls, dict(shape), ident,
                             run_dir_for(rc.out_dir, ident, rc.budget if uses_draft else None), rc.drafter.verifier))
    return plans
