"""The typed config blocks, one frozen dataclass per config group (conf/GROUP/*.yaml), and their constructors from
plain data. rsd.harness.config builds them once from the checked config; code past that edge reads their fields, never a
dict. A block refuses a key it does not declare (ConfigError naming it), so a typo cannot be silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

from rsd.core.budgets import DEFAULT_MAX_RUNS, Budget
from rsd.core.sampling import SamplingParams
from rsd.errors import ConfigError
from rsd.harness.kinds import is_int
from rsd.harness.selection import RANKINGS

T = TypeVar("T")


def from_dict(cls: type[T], data: Mapping[str, Any], key: str) -> T:
    """`cls(**data)` for a block at config key `key`; ConfigError for a key the block does not declare."""
    names = [f.name for f in fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ConfigError(f"unknown config key {key}.{unknown[0]}; {key} keys: {', '.join(names)}")
    return cls(**data)


@dataclass(frozen=True)
class Sampling:
    """The sampling transform and the generation length (conf/sampling)."""

    temperature: float
    top_k: int
    top_p: float
    max_new_tokens: int

    @property
    def params(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Sampling:
        return from_dict(cls, data, "sampling")


@dataclass(frozen=True)
class Dataset:
    """Which prompts a run decodes (conf/dataset): a built-in set, a local JSONL `path`, or a hub set `hub_id`
    (or its local copy) whose rows `template` formats; rsd.data.load_examples reads it."""

    name: str
    source: str = "builtin"
    task: str | None = None
    num_prompts: int | None = None
    max_prompt_tokens: int | None = None
    shuffle_seed: int | None = None
    path: str | None = None
    hub_id: str | None = None
    subset: str | None = None
    split: str | None = None
    template: str | None = None
    context_field: str | None = None
    context_template: str | None = None
    reference_field: str | None = None
    id_field: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Dataset:
        return from_dict(cls, data, "dataset")


@dataclass(frozen=True)
class Tiny:
    """A tiny pair's random weights (model_pair.tiny)."""

    vocab_size: int = 258
    seed: int = 0
    init_std: float = 0.02


@dataclass(frozen=True)
class ModelPairConfig:
    """The target/draft pair and how it loads (conf/model_pair); rsd.models.pairs loads it."""

    name: str
    target: str
    draft: str | None = None
    draft_kind: str = "lm"  # lm: a standalone draft model; feature_head: a head over the target's hidden states
    tokenizer: str | None = None
    chat: bool = False
    dtype: str | None = None
    device: str | None = "auto"
    device_map: Any = None  # accelerate's: "auto", a device, or {module: device}
    attn_implementation: str | None = None
    static_forward: str | None = None
    mix: float | None = None
    tiny: Tiny | None = None
    offload_folder: str | None = None  # where device_map's "disk" entries go (default $RSD_CACHE/offload)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelPairConfig:
        pair = from_dict(cls, {k: v for k, v in data.items() if k != "tiny"}, "model_pair")
        tiny = data.get("tiny")
        return pair if tiny is None else replace(pair, tiny=from_dict(Tiny, tiny, "model_pair.tiny"))


@dataclass(frozen=True)
class LoggerConfig:
    """The experiment logger (conf/logger): `name` in rsd.registry.LOGGERS, and wandb's settings."""

    name: str = "none"
    project: str = "rsd"
    entity: str | None = None
    mode: str = "auto"
    group: str | None = None
    tags: Sequence[str] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoggerConfig:
        return from_dict(cls, data, "logger")


@dataclass(frozen=True)
class Selection:
    """`budget.select`: rank every shape on `prompts` tuning prompts (from index `offset`, default the dataset's last;
    `new_tokens` new tokens each, default the run's), run the best `top` by `by` (rsd.harness.selection.RANKINGS) on the
    evaluation prompts."""

    prompts: int
    top: int
    offset: int | None = None
    new_tokens: int | None = None
    by: str = "prompt_mean"


def budget_from(b: Mapping[str, Any]) -> Budget:
    """The `budget` block as a Budget (its own checks refuse a bad kind, length or cap)."""
    return Budget(b["kind"], b.get("draft_length"), b.get("target_tokens"), b.get("max_depth"),
                  b.get("max_runs", DEFAULT_MAX_RUNS))


def selection_from(b: Mapping[str, Any]) -> Selection | None:
    """The checked `budget.select` block, or None when selection is off."""
    sel = b.get("select")
    if not sel or not sel.get("prompts"):
        return None
    prompts, top = sel.get("prompts"), sel.get("top", 1)
    offset, new_tokens = sel.get("offset"), sel.get("new_tokens")
    if not is_int(prompts, 1):
        raise ConfigError(f"budget.select.prompts must be a positive integer (tuning prompts), got {prompts!r}")
    if not is_int(top, 1):
        raise ConfigError(f"budget.select.top must be a positive integer (shapes kept per method), got {top!r}")
    if offset is not None and not is_int(offset, 0):
        raise ConfigError(f"budget.select.offset must be null (the dataset's last prompts) or the index of the first "
                          f"tuning prompt, an integer >= 0, got {offset!r}")
    if new_tokens is not None and not is_int(new_tokens, 1):
        raise ConfigError(f"budget.select.new_tokens must be null (as sampling.max_new_tokens) or a positive integer "
                          f"(new tokens per tuning prompt), got {new_tokens!r}")
    by = sel.get("by", "prompt_mean")
    if by not in RANKINGS:
        raise ConfigError(f"budget.select.by={by!r} is not a ranking of tuning runs; use {' or '.join(RANKINGS)} "
                          "(prompt_mean: the mean over tuning prompts of per-prompt expected block efficiency, as the "
                          "report's tables; ratio_of_sums: total expected tokens / total target calls)")
    return Selection(prompts, top, offset, new_tokens, by)


def stored_blocks(identity: Mapping[str, Any]) -> tuple[ModelPairConfig, Dataset, Sampling]:
    """The typed model pair, dataset and sampling of a stored run's identity (the `config` of run.json and
    summary.json), for code that re-reads a finished run."""
    return (ModelPairConfig.from_dict(identity["model_pair"]), Dataset.from_dict(identity["dataset"]),
            Sampling.from_dict(identity["sampling"]))


__all__ = ["Dataset", "LoggerConfig", "ModelPairConfig", "Sampling", "Selection", "Tiny", "budget_from",
           "from_dict", "selection_from", "stored_blocks"]
