"""The keys the conf/ tree defines (per config group, per drafter class) and the check that refuses any other key, such
as a typo added with `+`, naming the closest known key."""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rsd.errors import ConfigError
from rsd.paths import CONF_DIR

# Keys every drafter accepts, whatever its YAML declares (the verifier plug-in: docs/adding_a_drafter.md §4).
DRAFTER_KEYS = ("_target_", "name", "verifier")


@functools.cache
def drafter_defaults(conf_dir: Path = CONF_DIR) -> dict[str, dict[str, Any]]:
    """{drafter `_target_`: its keys' values in conf/drafter/*.yaml}: the types a built-in drafter's keys take."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted((conf_dir / "drafter").glob("*.yaml")):
        node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        out.setdefault(str(node.get("_target_")), {}).update(node)
    return out


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

__all__ = ["check_known_keys", "drafter_defaults", "known_keys"]
