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


def split_overrides(parsed: list[Any], groups: set[str]) -> tuple[tuple[str, ...], list[Any]]:
    """(the overrides Hydra must compose: config groups and the search path; the plain value overrides, which Hydra
    applies after composing the defaults, so `apply_values` can apply them to a copy). A delete (`~key`) is composed
    by Hydra with all the others."""
    if any(o.is_delete() for o in parsed):
        return tuple(o.input_line for o in parsed), []
    composed = tuple(o.input_line for o in parsed
                     if o.key_or_group.split("/")[0] in groups or o.key_or_group == "hydra.searchpath")
    values = [o for o in parsed if o.key_or_group.split("/")[0] not in groups and o.key_or_group != "hydra.searchpath"]
    return composed, values


def apply_values(cfg: Any, values: list[Any]) -> None:
    """Apply value overrides (from `split_overrides`) to a composed config in place, by Hydra's own rules (its config
    loader's override step): `+key` only where the key is absent or null (or the value is a dict or list), `++key`
    anywhere, a plain `key` only where it exists; hydra.* values shape the launch, not the job's config."""
    from hydra.errors import ConfigCompositionException
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    for o in values:
        key, value = o.key_or_group, o.value()
        if key.startswith("hydra."):
            continue
        if o.is_add():
            if OmegaConf.select(cfg, key, throw_on_missing=False) is not None and not isinstance(value, (dict, list)):
                raise ConfigCompositionException(f"Could not append to config. An item is already at '{key}'.")
            OmegaConf.update(cfg, key, value, merge=True, force_add=True)
        elif o.is_force_add():
            OmegaConf.update(cfg, key, value, merge=True, force_add=True)
        else:
            try:
                OmegaConf.update(cfg, key, value, merge=True)
            except (ConfigAttributeError, ConfigKeyError):
                raise ConfigCompositionException(f"Could not override '{key}'. To append to your config use "
                                                 f"+{o.input_line}") from None


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
                selection, values = split_overrides(parser.parse_overrides(job), groups)
                if selection not in composed:
                    composed[selection] = compose(config_name="config", overrides=list(selection))
                cfg = composed[selection].copy()
                apply_values(cfg, values)
                confs.append(OmegaConf.to_container(cfg, resolve=True))
    return jobs, confs, hydra_cfg
