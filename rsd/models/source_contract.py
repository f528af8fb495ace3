"""What a model source is (ModelSource) and how one loads by default, cached per process (LOADED).

Every source answers without loading weights: `status` (loadable now, and from where), `fingerprint` (what identifies
the weights: run.json stores it) and `config` (the transformers config its files hold here); `load` and `tokenizer`
load, cached per process.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rsd.harness.schema import ModelPairConfig
from rsd.models import hub
from rsd.models.embedded import cache_root

LOADED: dict[tuple, Any] = {}  # models ("hf", spec, ...), tiny pairs ("tiny", spec, ...) and tokenizers ("tok", spec)


def resolve_device(device: str) -> torch.device:
    """`auto` -> CUDA when there is one, else the CPU; anything else as torch reads it."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def eos_ids(tokenizer: Any, model: Any) -> list[int]:
    """The union of the tokenizer's EOS and the generation config's EOS ids."""
    ids = set()
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if gen_eos is not None:
        ids.update(int(i) for i in (gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]))
    return sorted(ids)


def registered_transformers() -> Any:
    """The transformers package, with the trimmed-head draft's config class registered so that its Auto classes
    load it."""
    import transformers

    import rsd.models.trimmed  # noqa: F401  (registers the trimmed-head draft's config class)

    return transformers


def evict_except(keep: set[str]) -> None:
    """Drop every loaded model (not tokenizer) whose spec is not in `keep`, and free the CUDA cache."""
    for key in [k for k in LOADED if k[0] in ("hf", "tiny") and k[1] not in keep]:
        del LOADED[key]
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@dataclass(frozen=True)
class ModelSource(ABC):
    """One model spec: where its files are, what identifies them, and how it loads (see the module docstring)."""

    spec: str

    built = False  # weights built from a config, no files (the tiny pairs)
    own_vocabulary = True  # a tokenizer of its own, to check against the target's (a feature head has none)
    config_origin = "config.json"  # what `config` reads

    @abstractmethod
    def status(self, tokenizer_only: bool = False) -> tuple[bool, str]:
        """(loadable now, where from), checked without loading (a hub id: a short TCP check, never when offline)."""

    @abstractmethod
    def fingerprint(self) -> dict:
        """What identifies the weights, read without loading them (stored in run.json: never change its layout)."""

    def files(self) -> Path | None:
        """The directory its files are in here, without converting or downloading anything; None when none is."""
        return None

    def config(self) -> Any:
        """The transformers config its files hold here (no weights, no download); None when unknown or unreadable."""
        path = self.files()
        if path is None or not (path / "config.json").is_file():
            return None
        try:
            return registered_transformers().AutoConfig.from_pretrained(path)
        except (OSError, ValueError, KeyError):
            return None  # a broken config.json: `status` reports the model as unavailable, with the reason

    def num_params(self) -> int | None:
        """Its parameter count, for a source whose `config` is not a transformers config (None: count from `config`)."""
        return None

    def path(self) -> str:
        """What transformers loads from (the embedded target is converted here on first use)."""
        return self.spec

    def check(self, key: str) -> None:
        """Raise a one-line ConfigError naming the config `key` when the spec can never load (by default it can)."""
        return None

    def require(self, what: str) -> None:
        """Fail at once (ModelUnavailableError) when the model or tokenizer (`what`) cannot be loaded now (by default,
        files rsd ships or builds, it can)."""
        return None

    def load(self, cfg: ModelPairConfig, target: Any = None) -> Any:
        """The model placed by `cfg`'s `device_map` or `device` in its `dtype` (cached per process); `target` is the
        loaded target a draft may build on.

        `device_map` (accelerate) may be "auto", a device, or a dict module -> device ("disk" entries are offloaded to
        `offload_folder`, default $RSD_CACHE/offload). A model that cannot be loaded fails at once (`require`).
        """
        key = ("hf", self.spec, cfg.dtype, cfg.device, repr(cfg.device_map), cfg.attn_implementation)
        if key in LOADED:
            return LOADED[key]
        path = self.path()
        kwargs: dict[str, Any] = {"dtype": getattr(torch, cfg.dtype or "float32"),
                                  "attn_implementation": cfg.attn_implementation or "sdpa"}
        if cfg.device_map:
            kwargs["device_map"] = cfg.device_map
            kwargs["offload_folder"] = str(cfg.offload_folder or cache_root() / "offload")
        self.require("model")
        try:
            model = registered_transformers().AutoModelForCausalLM.from_pretrained(path, **kwargs)
        except OSError as err:
            raise hub.unavailable("model", self.spec, err) from None
        if not cfg.device_map:
            model = model.to(resolve_device(cfg.device or "auto"))
        LOADED[key] = model
        return model

    def tokenizer(self) -> Any:
        """Its tokenizer (cached per process)."""
        key = ("tok", self.spec)
        if key not in LOADED:
            self.require("tokenizer")
            try:
                LOADED[key] = registered_transformers().AutoTokenizer.from_pretrained(self.path())
            except OSError as err:
                raise hub.unavailable("tokenizer", self.spec, err) from None
        return LOADED[key]

    def context_length(self) -> int | None:
        """Its max_position_embeddings, read from its config alone; None when it has none."""
        try:
            config = registered_transformers().AutoConfig.from_pretrained(self.path())
        except OSError as err:
            raise hub.unavailable("model config", self.spec, err) from None
        return int(getattr(config, "max_position_embeddings", 0) or 0) or None

    def eos_token_ids(self, tokenizer: Any, model: Any) -> list[int]:
        """The token ids that end a generation of this target loaded with `tokenizer`."""
        return eos_ids(tokenizer, model)

    def narrow_vocabulary(self, rows: int, tokens: int) -> str:
        """The error for a pair whose output layer has fewer `rows` than the tokenizer's `tokens`."""
        return f"a model's output layer ({rows} rows) is narrower than the tokenizer ({tokens} tokens)"

    def own_draft(self, kind: str) -> ModelSource | None:
        """The draft this target builds itself whatever model_pair.draft names (`kind`: model_pair.draft_kind); None
        when its draft is the one the config names (rsd.models.source.draft_source)."""
        return None
