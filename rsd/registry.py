"""The extension points by name: one `Registry` per kind (drafters, verifiers, node rules, loggers, built-in datasets,
tiny and embedded models) and one `lookup` that imports what a config names, checks it is of that kind, and
explains an unknown name with the known ones and the closest match.

A config names a registered built-in or, where the kind is open, a user's `package.module.Object`. Built-ins are
registered by dotted path, so importing this module imports nothing heavy (only rsd.errors).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rsd.errors import ConfigError, one_line

DOTTED = "a dotted path package.module.Object on PYTHONPATH"


@dataclass(frozen=True)
class Registry:
    """Names of one kind -> dotted paths. `base` is the dotted path of the class its objects subclass (are instances
    of, when `instances`) or of the Protocol whose members they have (a class is then instantiated without arguments
    when `instances`); None accepts any callable. `open` also accepts a user's dotted path; `key` is the config key
    errors name."""

    kind: str
    key: str
    entries: Mapping[str, str]
    base: str | None = None
    instances: bool = False
    open: bool = True

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def path(self, name: str) -> str:
        """The dotted path a registered name stands for; any other name as it is."""
        return self.entries.get(name, name)


# In table and legend order (a tree-level verifier right after its drafts' method).
DRAFTERS = Registry("drafter", "drafter._target_", {
    "ar": "rsd.drafters.AR", "pld": "rsd.drafters.PLD", "sd": "rsd.drafters.SD", "bv": "rsd.drafters.BV",
    "specinfer": "rsd.drafters.SpecInfer", "spectr": "rsd.drafters.SpecTr", "rsd_c": "rsd.drafters.RSDC",
    "tv": "rsd.drafters.TV", "rsd_s": "rsd.drafters.RSDS", "eagle2": "rsd.drafters.Eagle2"},
    base="rsd.drafters.base.Drafter")
# The built-in drafters' display names in tables and figures (a user's drafter is shown by its name).
DRAFTER_LABELS = {"ar": "AR", "pld": "PLD", "sd": "SD", "bv": "BV", "specinfer": "SpecInfer", "spectr": "SpecTr",
                  "rsd_c": "RSD-C", "tv": "TV", "rsd_s": "RSD-S", "eagle2": "EAGLE-2 tree"}
VERIFIERS = Registry("verifier", "drafter.verifier", {
    "walk": "rsd.verify.walk.Walk", "block": "rsd.verify.block.Block", "traversal": "rsd.verify.traversal.Traversal"},
    base="rsd.verify.base.Verifier", instances=True)
RULES = Registry("node rule", "rule", {
    "sd": "rsd.core.rules.sd_rule", "specinfer": "rsd.core.rules.specinfer_rule", "kseq": "rsd.core.rules.kseq_rule",
    "rsd": "rsd.core.rules.rsd_rule", "onehot": "rsd.core.rules.onehot_rule"})
LOGGERS = Registry("logger", "logger.name",
                   {"none": "rsd.harness.logger.NullLogger", "wandb": "rsd.harness.logger.WandbLogger"},
                   base="rsd.harness.logger.Logger")
DATASETS = Registry("built-in dataset", "dataset.name", {
    "xsum_builtin": "rsd.data.XSUM", "wmt_builtin": "rsd.data.WMT", "dolly_builtin": "rsd.data.DOLLY"},
    base="rsd.data.BuiltinSet", instances=True, open=False)
TINY_MODELS = Registry("tiny pair", "model_pair.target", {
    "tiny:llama": "rsd.models.tiny.llama", "tiny:opt": "rsd.models.tiny.opt"}, open=False)
EMBEDDED_MODELS = Registry("embedded model", "model_pair.target", {
    "embedded:smollm2-135m-instruct": "rsd.models.embedded.embedded_target_dir",
    "embedded:smollm2-draft": "rsd.models.embedded.smollm2_draft_dir",
    "embedded:smollm2-draft-v2": "rsd.models.embedded.smollm2_draft_v2_dir",
    "embedded:smollm2-draft-v3": "rsd.models.embedded.smollm2_draft_v3_dir",
    "embedded:smollm2-eagle": "rsd.models.embedded.smollm2_eagle_dir"}, open=False)


def lookup(registry: Registry, name: str, key: str | None = None) -> Any:
    """The object `name` stands for (a registered name, or a user's dotted path where the registry is open), checked
    against the registry's base; a one-line ConfigError naming `key` (default: the registry's) otherwise."""
    key = key or registry.key
    if isinstance(name, str) and name in registry.entries:
        return _checked(registry, key, name, import_object(registry.entries[name]))
    if not (registry.open and isinstance(name, str) and "." in name.strip(".")):
        raise ConfigError(f"{key}={name!r} is not {_a(registry.kind)}{_did_you_mean(registry, name)}; "
                          f"{_known(registry)}")
    try:
        obj = import_object(name)
    except Exception as err:  # a user's path: whatever its import raises, on one line
        raise ConfigError(f"{key}={name!r} cannot be imported ({one_line(err, where=False)})"
                          f"{_did_you_mean(registry, name)}; {_known(registry)}") from None
    return _checked(registry, key, name, obj)


def import_object(dotted: str) -> Any:
    """The object at `package.module.Name` (ImportError or AttributeError when there is none)."""
    module_name, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module_name), name)


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _known(registry: Registry) -> str:
    return f"use one of {', '.join(registry.entries)}" + (f" or {DOTTED}" if registry.open else "")


def _did_you_mean(registry: Registry, name: Any) -> str:
    known = [*registry.entries, *registry.entries.values()] if registry.open else list(registry.entries)
    match = difflib.get_close_matches(str(name), known, n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _members(protocol: type) -> list[str]:
    """A Protocol's attributes and public methods, in definition order."""
    methods = [k for k, v in vars(protocol).items() if callable(v) and not k.startswith("_")]
    return [*vars(protocol).get("__annotations__", {}), *methods]


def _checked(registry: Registry, key: str, name: str, obj: Any) -> Any:
    """`obj` (a Protocol class instantiated when the registry holds instances) if it is of the registry's kind."""
    if registry.base is None:
        if not callable(obj):
            raise ConfigError(f"{key}={name!r} is not {_a(registry.kind)}: it is not callable")
        return obj
    base = import_object(registry.base)
    if getattr(base, "_is_protocol", False):
        methods = [m for m in _members(base) if callable(getattr(base, m, None))]
        if registry.instances and isinstance(obj, type) and all(callable(getattr(obj, m, None)) for m in methods):
            try:
                obj = obj()
            except Exception as err:  # a user's class: its own words, on one line
                raise ConfigError(f"{key}={name!r} could not be constructed without arguments: "
                                  f"{type(err).__name__}: {one_line(err)}") from None
        missing = [m for m in _members(base) if not hasattr(obj, m) or (m in methods and not callable(getattr(obj, m)))]
        if missing:
            raise ConfigError(f"{key}={name!r} is not a {base.__name__} (it has no {', '.join(missing)}): name a "
                              f"{'class or instance' if registry.instances else 'class'} that implements "
                              f"{registry.base}")
        return obj
    if registry.instances and not isinstance(obj, base):
        raise ConfigError(f"{key}={name!r} is not a {base.__name__}: name an instance of {registry.base}")
    if not registry.instances and not (isinstance(obj, type) and issubclass(obj, base)):
        raise ConfigError(f"{key}={name!r} is not a {base.__name__}: name a subclass of {registry.base}")
    return obj
