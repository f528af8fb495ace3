"""Model pairs: resolve a `model_pair` config to a loaded target, draft and tokenizer (cached per process)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rsd.errors import ConfigError
from rsd.models.adapter import CausalLM
from rsd.models.embedded import ModelUnavailableError, embedded_draft_dir, embedded_target_dir
from rsd.models.tiny import tiny_pair

EMBEDDED = {"smollm2-135m-instruct": embedded_target_dir, "smollm2-draft": embedded_draft_dir}


class TokenizerMismatchError(ConfigError):
    """Target and draft do not share a vocabulary, so draft tokens cannot be verified by the target."""


class ByteTokenizer:
    """UTF-8 bytes as tokens 0..255 plus BOS 256 and EOS 257: a tokenizer for the file-less tiny pairs."""

    bos_token_id, eos_token_id = 256, 257

    def __len__(self) -> int:
        return 258

    def encode(self, text: str) -> list[int]:
        return [self.bos_token_id] + list(text.encode("utf-8"))

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


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
        if isinstance(self.tokenizer, ByteTokenizer):
            return self.tokenizer.encode(text)
        if self.chat:
            return list(self.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                           add_generation_prompt=True, tokenize=True,
                                                           return_dict=True)["input_ids"])
        return list(self.tokenizer(text)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


_CACHE: dict[tuple, Any] = {}


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_path(spec: str) -> str:
    """`embedded:NAME` -> the converted/shipped directory; anything else is a hub id or a local path."""
    if spec.startswith("embedded:"):
        name = spec.split(":", 1)[1]
        if name not in EMBEDDED:
            raise ModelUnavailableError(f"unknown embedded model {name!r}; known: {sorted(EMBEDDED)}")
        return str(EMBEDDED[name]())
    return spec


def hub_offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it: 1, true, yes or on (any case)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "TRUE", "YES", "ON")


def unavailable(what: str, spec: str, err: Exception) -> ModelUnavailableError:
    """The one-line error for a model or tokenizer that cannot be loaded, saying how to get it.

    A spec that can only be a path (see rsd.validate.looks_like_local_path) or that exists on disk is reported as a
    local path, never as a bad hub id; anything else gets the `hf download` command of the installed huggingface_hub.
    """
    from rsd.validate import looks_like_local_path

    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    path = Path(spec).expanduser()
    if path.exists():
        return ModelUnavailableError(f"could not load the {what} from the local directory {spec!r}: {reason}; it "
                                     "must hold a transformers model (config.json and the weights or tokenizer files)")
    if looks_like_local_path(spec):
        return ModelUnavailableError(f"the {what} {spec!r} is a local path that does not exist (relative paths start "
                                     f"in {Path.cwd()}): fix the model_pair's target/draft/tokenizer path")
    return ModelUnavailableError(
        f"could not load the {what} {spec!r} ({reason}); "
        + ("HF_HUB_OFFLINE is set and it is not in the local cache; " if hub_offline() else "")
        + f"download it on a machine with internet (`hf download {spec}`; gated models need `hf auth login` first) "
        "or set the model_pair's target/draft to a local directory")


def _load_hf(spec: str, cfg: Mapping[str, Any]):
    from transformers import AutoModelForCausalLM

    key = ("hf", spec, cfg.get("dtype"), cfg.get("device"), cfg.get("device_map"), cfg.get("attn_implementation"))
    if key in _CACHE:
        return _CACHE[key]
    path = resolve_path(spec)
    kwargs: dict[str, Any] = {"dtype": getattr(torch, cfg.get("dtype") or "float32"),
                              "attn_implementation": cfg.get("attn_implementation") or "sdpa"}
    if cfg.get("device_map"):
        kwargs["device_map"] = cfg["device_map"]
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except OSError as err:
        raise unavailable("model", spec, err) from None
    if not cfg.get("device_map"):
        model = model.to(resolve_device(cfg.get("device", "auto")))
    _CACHE[key] = model
    return model


def _load_tokenizer(spec: str):
    from transformers import AutoTokenizer

    key = ("tok", spec)
    if key not in _CACHE:
        try:
            _CACHE[key] = AutoTokenizer.from_pretrained(resolve_path(spec))
        except OSError as err:
            raise unavailable("tokenizer", spec, err) from None
    return _CACHE[key]


def check_same_vocabulary(target_tok: Any, draft_tok: Any, target: str, draft: str) -> None:
    """Raise TokenizerMismatchError unless both tokenizers map every token string to the same id."""
    tv, dv = target_tok.get_vocab(), draft_tok.get_vocab()
    if tv != dv:
        differ = sum(1 for k, v in tv.items() if dv.get(k) != v) + sum(1 for k in dv if k not in tv)
        raise TokenizerMismatchError(
            f"target {target!r} and draft {draft!r} have different tokenizers ({len(tv)} vs {len(dv)} tokens, "
            f"{differ} differ); speculative decoding needs one shared vocabulary: pick a draft of the same family")


def eos_ids(tokenizer: Any, model: Any) -> list[int]:
    """The union of the tokenizer's EOS and the generation config's EOS ids."""
    ids = set()
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if gen_eos is not None:
        ids.update(int(i) for i in (gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]))
    return sorted(ids)


def _evict_other_pairs(cfg: Mapping[str, Any]) -> None:
    """Keep one model pair's weights in memory: a sweep over pairs (70B after 13B...) must not accumulate them."""
    keep = {str(cfg.get("target")), str(cfg.get("draft")), str(cfg.get("tokenizer"))}
    for key in [k for k in _CACHE if k[0] in ("hf", "tiny") and k[1] not in keep]:
        del _CACHE[key]
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def load_pair(cfg: Mapping[str, Any], need_draft: bool = True) -> ModelPair:
    """Load (or reuse, within this process) the models a `model_pair` config names."""
    _evict_other_pairs(cfg)
    if str(cfg["target"]).startswith("tiny:"):
        tiny = dict(cfg.get("tiny") or {})
        key = ("tiny", cfg["target"], tuple(sorted(tiny.items())))
        if key not in _CACHE:
            _CACHE[key] = tiny_pair(cfg["target"].split(":", 1)[1], vocab_size=tiny.get("vocab_size", 258),
                                    seed=tiny.get("seed", 0), init_std=tiny.get("init_std", 0.02),
                                    attn_implementation=cfg.get("attn_implementation") or "sdpa")
        target, draft = _CACHE[key]
        tok = ByteTokenizer()
        if target.config.vocab_size < len(tok):
            raise ConfigError(f"tiny pairs need tiny.vocab_size >= {len(tok)} for the byte tokenizer")
        return ModelPair(cfg["name"], CausalLM(target), CausalLM(draft) if need_draft else None, tok, False,
                         [tok.eos_token_id], target.config.vocab_size)
    tok = _load_tokenizer(cfg.get("tokenizer") or cfg["target"])
    draft_model = None
    if need_draft:
        if not cfg.get("draft"):
            raise ConfigError(f"model_pair {cfg['name']!r} names no draft model, which this drafter needs")
        check_same_vocabulary(tok, _load_tokenizer(cfg["draft"]), cfg["target"], cfg["draft"])
    target_model = _load_hf(cfg["target"], cfg)
    if need_draft:
        draft_model = _load_hf(cfg["draft"], cfg)
    widths = [target_model.get_output_embeddings().weight.shape[0]]
    if draft_model is not None:
        widths.append(draft_model.get_output_embeddings().weight.shape[0])
    vocab = min(widths)
    if vocab < len(tok):
        raise TokenizerMismatchError(f"a model's output layer ({vocab} rows) is narrower than the tokenizer "
                                     f"({len(tok)} tokens)")
    return ModelPair(cfg["name"], CausalLM(target_model), CausalLM(draft_model) if draft_model is not None else None,
                     tok, bool(cfg.get("chat", False)), eos_ids(tok, target_model), vocab)

