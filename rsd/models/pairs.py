"""Model pairs: resolve a `model_pair` config to a loaded target, draft and tokenizer (cached per process).

What each model is and where it comes from is its rsd.models.source_contract.ModelSource; this module pairs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rsd.errors import ConfigError
from rsd.harness.schema import ModelPairConfig
from rsd.models.adapter import CausalLM
from rsd.models.dial import MixtureLM
from rsd.models.feature_head.lm import HeadLM
from rsd.models.source import pair_sources
from rsd.models.source_contract import evict_except
from rsd.models.tiny import ByteTokenizer


class TokenizerMismatchError(ConfigError):
    """Target and draft do not share a vocabulary, so draft tokens cannot be verified by the target."""


@dataclass
class ModelPair:
    """A loaded target and (optional) draft sharing one tokenizer and a common vocabulary width."""

    name: str
    target: CausalLM
    draft: CausalLM | None
    tokenizer: Any
    chat: bool
    eos_token_ids: list[int]
    vocab_size: int

    @property
    def target_params(self) -> int:
        return self.target.num_params

    @property
    def draft_params(self) -> int:
        return self.draft.num_params if self.draft is not None else 0

    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of a prompt; chat models get their chat template with the generation prompt."""
        return encode_prompt(self.tokenizer, self.chat, text)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def encode_prompt(tokenizer: Any, chat: bool, text: str) -> list[int]:
    """Token ids of a prompt; chat models get their chat template with the generation prompt."""
    if isinstance(tokenizer, ByteTokenizer):
        return tokenizer.encode(text)
    if chat:
        return list(tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                  tokenize=True, return_dict=True)["input_ids"])
    return list(tokenizer(text)["input_ids"])


def text_token_ids(tokenizer: Any, text: str) -> list[int]:
    """Token ids of `text` alone: no special tokens, no chat template (what prompt truncation cuts)."""
    if isinstance(tokenizer, ByteTokenizer):
        return list(text.encode("utf-8"))
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def check_same_vocabulary(target_tok: Any, draft_tok: Any, target: str, draft: str) -> None:
    """Raise TokenizerMismatchError unless both tokenizers map every token string to the same id."""
    tv, dv = target_tok.get_vocab(), draft_tok.get_vocab()
    if tv != dv:
        differ = sum(1 for k, v in tv.items() if dv.get(k) != v) + sum(1 for k in dv if k not in tv)
        raise TokenizerMismatchError(
            f"target {target!r} and draft {draft!r} have different tokenizers ({len(tv)} vs {len(dv)} tokens, "
            f"{differ} differ); speculative decoding needs one shared vocabulary: pick a draft of the same family")


def load_pair(cfg: ModelPairConfig, need_draft: bool = True) -> ModelPair:
    """Load (or reuse, within this process) the models a `model_pair` config names."""
    evict_except({str(cfg.target), str(cfg.draft), str(cfg.tokenizer)})  # one pair in memory
    sources = pair_sources(cfg)
    tok = sources.tokenizer.tokenizer()
    draft = sources.draft if need_draft else None
    if need_draft and draft is None:
        raise ConfigError(f"model_pair {cfg.name!r} names no draft model, which this drafter needs")
    if draft is not None and draft.own_vocabulary:
        check_same_vocabulary(tok, draft.tokenizer(), cfg.target, cfg.draft)
    target_model = sources.target.load(cfg)
    draft_model = draft.load(cfg, target_model) if draft is not None else None
    from rsd.models.trimmed import output_width  # not at the top: it imports transformers' model classes (seconds)

    widths = [output_width(target_model)]
    if draft_model is not None:
        widths.append(draft_model.vocab_size if isinstance(draft_model, HeadLM) else output_width(draft_model))
    vocab = min(widths)
    if vocab < len(tok):
        raise TokenizerMismatchError(sources.target.narrow_vocabulary(vocab, len(tok)))
    if draft_model is not None and not isinstance(draft_model, HeadLM):
        draft_model = draft_lm(draft_model, target_model, cfg)
    return ModelPair(cfg.name, CausalLM(target_model, static_mode(cfg)), draft_model, tok,
                     cfg.chat, sources.target.eos_token_ids(tok, target_model), vocab)


def draft_lm(draft_model: Any, target_model: Any, cfg: ModelPairConfig) -> CausalLM | MixtureLM:
    """The pair's draft with its own KV cache; with `mix` set, the acceptance dial's mixture with the target."""
    if cfg.mix is None:
        return CausalLM(draft_model, static_mode(cfg))
    return MixtureLM(CausalLM(draft_model, static_mode(cfg)), CausalLM(target_model, static_mode(cfg)),
                     float(cfg.mix))


def static_mode(cfg: ModelPairConfig) -> str:
    """CausalLM's `static` argument for `model_pair.static_forward` (null: off)."""
    return cfg.static_forward or "off"


def load_pair_tokenizer(cfg: ModelPairConfig) -> Any:
    """The tokenizer `load_pair` would give this `model_pair` config, without loading any weights."""
    return pair_sources(cfg).tokenizer.tokenizer()


def pair_context_length(cfg: ModelPairConfig, need_draft: bool = True) -> int | None:
    """The smallest context (max_position_embeddings) of the pair's models, read from their configs alone."""
    sources = pair_sources(cfg)
    models = [sources.target] + ([sources.draft] if need_draft and sources.draft is not None else [])
    return min((n for n in (m.context_length() for m in models) if n), default=None)
