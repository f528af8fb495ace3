"""Resolve Hydra's config once, at the edge, into a frozen typed `RunConfig`: every check happens here, before any
model loads or any file is written, and the code after it reads typed fields, never the raw dict.

`resolve_config` runs rsd.harness.validate's checks (each a one-line ConfigError naming the key), imports the drafter
class, counts and lists the tree shapes the budget asks for (a huge budget is refused by its count, in milliseconds) and
builds every shape's drafter once. A run's identity (what names its directory) comes from `RunConfig.identity`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from rsd.core.budgets import MAX_TREE_TOKENS, Budget, select_shapes, shape_tag
from rsd.drafters.base import Drafter
from rsd.errors import ConfigError, RsdError, one_line
from rsd.harness.identity import identity_digest, join_inside
from rsd.harness.schema import (
    Dataset,
    LoggerConfig,
    ModelPairConfig,
    Sampling,
    Selection,
    budget_from,
    selection_from,
)
from rsd.harness.validate import validate_config
from rsd.models.hardware import resolve_dtype
from rsd.registry import DRAFTERS, RULES, VERIFIERS, lookup
from rsd.verify import verifier_for

# Keys that do not change what a run computes: excluded from the run identity (and so from its directory name).
NON_IDENTITY_KEYS = ("out_dir", "logger", "hydra")
# Budget keys that only choose which shapes run (the shape itself is in the identity): a shape run by a sweep with a
# depth limit, a pin or a higher run cap is the same run as without them.
SHAPE_FILTER_KEYS = ("max_depth", "max_runs", "shape")


@dataclass(frozen=True)
class DrafterConfig:
    """The drafter class, its method name (with `+verifier` when the YAML swaps the verifier) and its shapes."""

    method: str
    target: str
    cls: type[Drafter]
    verifier: str | None
    shapes: tuple[Mapping[str, Any], ...]

    def make(self, shape: Mapping[str, Any]) -> Drafter:
        """A drafter of one shape (resolution built each one already, so this does not fail)."""
        drafter = self.cls(**shape)
        if self.verifier is not None:
            drafter.verifier = self.verifier
        return drafter


@dataclass(frozen=True)
class RunConfig:
    """A resolved, checked config. `resolved` is Hydra's config as plain data (without `hydra`): only `identity`
    and run.json read it; everything else reads the typed fields."""

    seed: int
    num_threads: int | None
    out_dir: Path
    sampling: Sampling
    dataset: Dataset
    model_pair: ModelPairConfig
    budget: Budget
    select: Selection | None
    drafter: DrafterConfig
    logger: LoggerConfig
    resolved: Mapping[str, Any]

    def with_out_dir(self, out_dir: Path) -> RunConfig:
        """The same runs, with results below `out_dir`."""
        return replace(self, out_dir=out_dir, resolved={**self.resolved, "out_dir": str(out_dir)})

    def for_tuning(self) -> RunConfig:
        """The tuning runs of `budget.select`: below `out_dir/tuning`, with `select.new_tokens` new tokens if set."""
        tuning = self.with_out_dir(self.out_dir / "tuning")
        new_tokens = self.select.new_tokens if self.select is not None else None
        if new_tokens is None:
            return tuning
        resolved = {**tuning.resolved, "sampling": {**tuning.resolved["sampling"], "max_new_tokens": new_tokens}}
        return replace(tuning, sampling=replace(self.sampling, max_new_tokens=new_tokens), resolved=resolved)

    def identity(self, shape: Mapping[str, Any], uses_draft: bool, inputs: Mapping[str, Any] | None = None) -> dict:
        """The part of the config that determines a run's results, with the concrete shape and `inputs`
        (runs.run_inputs) filled in. A method without a draft (AR) does not depend on the budget, so one AR run
        serves every budget of a sweep."""
        cfg = copy.deepcopy(dict(self.resolved))
        ident = {k: v for k, v in cfg.items() if k not in NON_IDENTITY_KEYS}
        ident["drafter"] = {"name": self.drafter.method, "_target_": self.drafter.target,
                            "shape": dict(shape)}
        if ident["model_pair"].get("static_forward") is None:  # eager forwards: the identity runs had before the key
            ident["model_pair"] = {k: v for k, v in ident["model_pair"].items() if k != "static_forward"}
        ident["budget"] = ({k: v for k, v in cfg["budget"].items() if k not in SHAPE_FILTER_KEYS} if uses_draft
                           else None)
        if ident["budget"] and isinstance(ident["budget"].get("select"), Mapping):
            # Where the tuning prompts sit is in the tuning runs' own inputs (their examples' digest), and how they
            # are ranked chooses runs without changing any: a preset that pins either keeps its runs' identities.
            ident["budget"]["select"] = {k: v for k, v in ident["budget"]["select"].items()
                                         if k not in ("offset", "by")}
        if inputs is not None:
            ident["inputs"] = dict(inputs)
        if self.drafter.verifier is not None:
            ident["drafter"]["verifier"] = self.drafter.verifier
        return ident


def _g(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def run_dir_for(out_dir: Path, identity: Mapping[str, Any], budget: Budget | None) -> Path:
    """A stable, readable directory below `out_dir` for a run's `identity` (RunConfig.identity):
    pair/dataset/sampling/budget/method-shape-seed-hash.

    Every component is sanitised (rsd.harness.identity.safe_component), so no config value can lead outside `out_dir`.
    """
    s = identity["sampling"]
    sampling = f"T{_g(s['temperature'])}-k{s['top_k']}-p{_g(s['top_p'])}-n{s['max_new_tokens']}"
    leaf = (f"{identity['drafter']['name']}-{shape_tag(identity['drafter']['shape'])}-s{identity['seed']}-"
            f"{identity_digest(identity)}")
    budget_tag = budget.tag if budget is not None else "no-draft"
    return join_inside(Path(out_dir), [identity["model_pair"]["name"], identity["dataset"]["name"], sampling,
                                       budget_tag, leaf])


def to_dict(cfg: DictConfig | Mapping) -> dict:
    """Hydra's config (or a mapping) as plain, resolved data; ConfigError naming the key whose interpolation
    (`${oc.env:VAR}`, `${other.key}`) does not resolve."""
    if not isinstance(cfg, DictConfig):
        return dict(cfg)
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except InterpolationResolutionError as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"{err.full_key or 'a config value'}: its interpolation does not resolve ({first}); set "
                          "what it names (e.g. export the environment variable) or give the value directly") from None


def resolve_config(cfg: DictConfig | Mapping) -> RunConfig:
    """Check `cfg` (validate, then the drafter and its shapes) and return it typed; ConfigError on bad input."""
    conf = {k: v for k, v in to_dict(cfg).items() if k != "hydra"}
    drafter = conf.get("drafter")
    if isinstance(drafter, Mapping) and isinstance(drafter.get("_target_"), str):  # `sd` and its path: one identity
        conf["drafter"] = {**drafter, "_target_": DRAFTERS.path(drafter["_target_"])}
    validate_config(conf)
    if conf["model_pair"].get("dtype") == "auto":  # made concrete here, so a run's identity names its real dtype
        pair = conf["model_pair"]
        conf["model_pair"] = {**pair, "dtype": resolve_dtype("auto", str(pair.get("device") or "auto"))}
    b = conf["budget"]
    budget = budget_from(b)
    return RunConfig(
        seed=conf["seed"], num_threads=conf.get("num_threads"), out_dir=Path(conf["out_dir"]),
        sampling=Sampling.from_dict(conf["sampling"]), dataset=Dataset.from_dict(conf["dataset"]),
        model_pair=ModelPairConfig.from_dict(conf["model_pair"]), budget=budget, select=selection_from(b),
        drafter=_resolve_drafter(conf["drafter"], budget, b.get("shape")),
        logger=LoggerConfig.from_dict(conf.get("logger") or {}), resolved=conf)


def _resolve_drafter(drafter_cfg: Mapping[str, Any], budget: Budget, pin: Mapping[str, Any] | None
                     ) -> DrafterConfig:
    """The drafter class and every shape of it the budget asks for, each built once (so a drafter's own refusal,
    whatever it raises, is a one-line ConfigError here)."""
    params = dict(drafter_cfg)
    target, method = params.pop("_target_"), params.pop("name")
    cls = lookup(DRAFTERS, target)
    verifier = params.pop("verifier", None)
    if verifier is not None and not isinstance(verifier, str):  # 42: refused by name, like a bad dotted path
        lookup(VERIFIERS, verifier, "drafter.verifier")
    verifier = None if verifier == cls.verifier else verifier
    if verifier is not None:
        method = f"{method}+{verifier}"  # another verifier on the same trees is another method
    try:
        listed = cls.shapes(budget, params)
    except RsdError:
        raise
    except Exception as err:  # a user's drafter: its own words, on one line
        raise ConfigError(f"drafter {method!r} could not list its shapes for budget {budget.tag}: "
                          f"{type(err).__name__}: {one_line(err)}") from None
    if not isinstance(listed, (list, tuple)) or not all(isinstance(shape, Mapping) for shape in listed):
        raise ConfigError(f"drafter {method!r}: shapes() returned {listed!r:.60} for budget {budget.tag}; it must "
                          "return a list of shapes, each a dict of the class's keyword arguments")
    shapes = select_shapes(method, listed, budget, pin)
    drafters = DrafterConfig(method, target, cls, verifier, tuple(shapes))
    for shape in shapes:
        try:
            drafter = drafters.make(shape)
        except Exception as err:
            raise ConfigError(f"drafter {method!r} rejects shape {shape}: {one_line(err, where=False)}") from None
        check_plugin_drafter(drafter, method, shape)
        if drafter.max_tree_size > MAX_TREE_TOKENS:
            raise ConfigError(f"drafter {method!r} with shape {shape} drafts {drafter.max_tree_size:,} tokens per "
                              f"step, above {MAX_TREE_TOKENS:,} (more than any model's context holds): choose a "
                              "smaller budget or shape")
        if verifier is not None:
            verifier_for(drafter)  # refuse a verifier that is not exact on these trees before any model loads
    return drafters


def check_plugin_drafter(drafter: Drafter, method: str, shape: Mapping[str, Any]) -> None:
    """ConfigError before any model loads unless one built drafter has integer `draft_length` and `max_tree_size`
    >= 0 and, when the node-rule walk verifies it, a node rule that resolves (a name, a dotted path, a callable)."""
    for attr, what in (("draft_length", "the most levels a step drafts"),
                       ("max_tree_size", "the most drafted tokens a step verifies")):
        try:
            value = getattr(drafter, attr)
        except Exception as err:  # a user's property: its own words, on one line
            raise ConfigError(f"drafter {method!r} with shape {dict(shape)}: {attr} raised {type(err).__name__}: "
                              f"{one_line(err)}") from None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"drafter {method!r} with shape {dict(shape)} has {attr}={value!r:.40}; it must be an "
                              f"integer >= 0 ({what})")
    rule = getattr(drafter, "rule", None)  # required, with no default: a plug-in may lack it
    if drafter.verifier == "walk" and not callable(rule):
        lookup(RULES, rule, f"drafter {method!r}: its rule")


__all__ = ["NON_IDENTITY_KEYS", "SHAPE_FILTER_KEYS", "Dataset", "DrafterConfig", "LoggerConfig", "ModelPairConfig",
           "RunConfig", "Sampling", "Selection", "resolve_config", "run_dir_for", "to_dict"]
