"""Configs as the runner sees them: Hydra's composition of `python run.py OVERRIDES`, typed and checked, and a
representative subset of a preset's jobs."""

import copy
import functools

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

from rsd.harness.config import RunConfig, resolve_config
from rsd.harness.plan.compose import apply_values, config_groups, split_overrides
from rsd.paths import CONF_DIR

CONF = CONF_DIR
ROOT = CONF.parent
PARSER = OverridesParser.create()


@functools.cache
def _composed(overrides: tuple[str, ...]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def compose_cfg(*overrides: str):
    """The config `python run.py OVERRIDES` would see, composed as the pre-flight plan composes a sweep's jobs: Hydra
    composes each choice of config groups once per test process (a compose costs ~0.2 s), then the value overrides
    are applied to a copy, as Hydra applies them after the defaults (test_plan.py checks the two agree)."""
    parsed = PARSER.parse_overrides(list(overrides))
    selection, values = split_overrides(parsed, config_groups(parsed))
    cfg = copy.deepcopy(_composed(selection))
    apply_values(cfg, values)
    return cfg


def run_cfg(*overrides: str) -> RunConfig:
    """The typed, checked config `python run.py OVERRIDES` runs (rsd.harness.config.resolve_config of `compose_cfg`)."""
    return resolve_config(compose_cfg(*overrides))


def representative_jobs(jobs: list[list[str]]) -> list[list[str]]:
    """Jobs covering every drafter x budget combination (what validation depends on) and every other value once."""
    chosen = {}
    for job in jobs:
        chosen.setdefault(tuple(o for o in job if o.startswith(("drafter", "budget"))), job)
    covered = {o for job in chosen.values() for o in job}
    for job in jobs:
        if set(job) - covered:
            chosen[tuple(job)] = job
            covered |= set(job)
    return list(chosen.values())
