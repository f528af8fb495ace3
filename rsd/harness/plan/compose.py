"""Compose a sweep's jobs with Hydra, as `run.py -m OVERRIDES` would, without launching any (for the plan)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rsd.harness.sweep import expand_jobs
from rsd.paths import CONF_DIR


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
