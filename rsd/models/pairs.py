"""Model pairs: resolve a `model_pair` config to a loaded target, draft and tokenizer (cached per process)."""

from __future__ import annotations

import functools
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch

from rsd.errors import ConfigError
from rsd.models.adapter import CausalLM
from rsd.models.dial import MixtureLM
from rsd.models.embedded import (
    SHIPPED_DRAFTS,
    ModelUnavailableError,
    cache_root,
    gguf_path,
)
from rsd.models.feature_head import HeadLM, head_lm, is_feature_head, tiny_head_lm
from rsd.models.spec import looks_like_local_path
from rsd.models.tiny import CONTEXT_LENGTH, tiny_pair
from rsd.models.trimmed import output_width
from rsd.registry import EMBEDDED_MODELS, lookup


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


_CACHE: dict[tuple, Any] = {}


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_path(spec: str) -> str:
    """`embedded:NAME` -> the converted/shipped directory; anything else is a hub id or a local path."""
    if spec.startswith("embedded:"):
        return str(lookup(EMBEDDED_MODELS, spec, "model")())
    return spec


def offline() -> bool:
    """Whether the hub is switched off: HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is 1, true, yes or on, read now from
    the environment (huggingface_hub reads it once at import; `go_offline` sets it for this process too)."""
    return any(os.environ.get(var, "").strip().upper() in ("1", "TRUE", "YES", "ON")
               for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


@functools.cache
def hub_reachable(timeout: float = 3.0) -> bool:
    """One TCP connect to the hub endpoint (HF_ENDPOINT) with a short timeout; False when offline. Cached."""
    if offline():
        return False
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
    except OSError:
        return False
    return True


def go_offline() -> None:
    """Switch this process (and its children) to the local caches: no request, no retry, no timeout."""
    from huggingface_hub import constants

    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True
    try:
        import datasets

        datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
    except ImportError:
        pass


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def cached_hub_dir(repo: str, tokenizer_only: bool = False) -> Path | None:
    """The cached snapshot of a hub repo holding config.json and weights (or only a tokenizer), or None."""
    from huggingface_hub import try_to_load_from_cache

    for name in ("tokenizer_config.json", "tokenizer.json", "config.json") if tokenizer_only else ("config.json",):
        found = try_to_load_from_cache(repo, name)
        if isinstance(found, str):
            snapshot = Path(found).parent
            return snapshot if tokenizer_only or any((snapshot / f).exists() for f in WEIGHT_FILES) else None
    return None


TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json",
                   "vocab.txt", "config.json")  # any one of them lets AutoTokenizer find its way


def local_model_problem(path: Path, tokenizer_only: bool = False) -> str | None:
    """Why the local `path` cannot hold a transformers model (or only a tokenizer), read without loading; None if it
    can: a directory with a parseable config.json (or a tokenizer file)."""
    if not path.exists():
        return f"local path {path} does not exist"
    if not path.is_dir():
        return f"local path {path} is a file, not a model directory: point it at the directory holding config.json"
    if tokenizer_only:
        if any((path / f).is_file() for f in TOKENIZER_FILES):
            return None
        return f"local directory {path} holds no tokenizer files ({', '.join(TOKENIZER_FILES)})"
    config = path / "config.json"
    if not config.is_file():
        return f"local directory {path} holds no config.json: it is not a transformers model directory"
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (ValueError, OSError) as err:
        return f"{config} cannot be read as JSON ({str(err).splitlines()[0]}): re-download or re-save the model"
    return None


def model_status(spec: str, tokenizer_only: bool = False) -> tuple[bool, str]:
    """(loadable now, where from), checked without loading: built in, embedded, local directory, hub cache, or the
    hub itself when it answers (a short TCP check; never when offline)."""
    if spec.startswith("tiny:"):
        return True, "built from a config (no files)"
    if spec.startswith("embedded:"):
        try:
            lookup(EMBEDDED_MODELS, spec, "model")
        except ConfigError as err:
            return False, str(err)
        name = spec.split(":", 1)[1]
        if name in SHIPPED_DRAFTS:
            path = SHIPPED_DRAFTS[name]
            return ((path / "config.json").is_file() or is_feature_head(path)), f"shipped in {path}"
        converted = cache_root() / name  # the one embedded model converted from a GGUF file
        if (converted / "model.safetensors").is_file():
            return True, f"converted in {converted}"
        try:
            return True, f"converted on first use from {gguf_path()}"
        except ModelUnavailableError as err:
            return False, str(err)
    path = Path(spec).expanduser()
    if path.exists() or spec.startswith(("/", "./", "../", "~")):
        problem = local_model_problem(path, tokenizer_only)
        return problem is None, f"local directory {path}" if problem is None else problem
    snapshot = cached_hub_dir(spec, tokenizer_only)
    if snapshot is not None:
        return True, f"hub cache {snapshot}"
    if hub_reachable():
        return True, "hub (reachable; downloaded on first use)"
    return False, ("not in the hub cache and " + ("HF_HUB_OFFLINE is set" if offline() else "the hub is unreachable")
                   + f"; get it with `hf download {spec}` on a machine with internet")


def require_model(what: str, spec: str) -> None:
    """Fail at once for a model that cannot be loaded (instead of minutes of hub retries); when the hub does not
    answer but the model is cached, switch to offline mode so transformers reads the cache without retrying."""
    if spec.startswith(("tiny:", "embedded:")):
        return
    ok, where = model_status(spec, tokenizer_only=what == "tokenizer")
    if not ok:
        raise unavailable(what, spec, FileNotFoundError(where))
    if where.startswith("hub cache") and not hub_reachable():
        go_offline()


def unavailable(what: str, spec: str, err: Exception) -> ModelUnavailableError:
    """The one-line error for a model or tokenizer that cannot be loaded, saying how to get it.

    A spec that can only be a path (see rsd.models.spec.looks_like_local_path) or that exists on disk is reported as a
    local path, never as a bad hub id; anything else gets the `hf download` command of the installed huggingface_hub.
    """

    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    path = Path(spec).expanduser()
    if path.exists():
        return ModelUnavailableError(f"could not load the {what} from the local directory {spec!r}: {reason}; it "
                                     "must hold a transformers model (config.json and the weights or tokenizer files)")
    if looks_like_local_path(spec):
        return ModelUnavailableError(f"the {what} {spec!r} is a local path that does not exist (relative paths start "
                                     f"in {Path.cwd()}): fix the model_pair's target/draft/tokenizer path")
    if "hf download" in reason:  # rsd.models.pairs.model_status already said where to get it
        return ModelUnavailableError(f"could not load the {what} {spec!r}: {reason} (gated models need `hf auth "
                                     "login` first), or set the model_pair's target/draft to a local directory")
    return ModelUnavailableError(
        f"could not load the {what} {spec!r} ({reason}); "
        + ("HF_HUB_OFFLINE is set and it is not in the local cache; " if offline() else "")
        + f"download it on a machine with internet (`hf download {spec}`; gated models need `hf auth login` first) "
        "or set the model_pair's target/draft to a local directory")


def load_model(spec: str, cfg: Mapping[str, Any]):
    """A transformers causal LM (hub id, local directory or `embedded:NAME`) placed by `device_map` or `device`.

    `device_map` (accelerate) may be "auto", a device, or a dict module -> device ("disk" entries are offloaded to
    `offload_folder`, default $RSD_CACHE/offload). A hub id missing from the cache fails at once (require_model).
    """
    from transformers import AutoModelForCausalLM

    key = ("hf", spec, cfg.get("dtype"), cfg.get("device"), repr(cfg.get("device_map")), cfg.get("attn_implementation"))
    if key in _CACHE:
        return _CACHE[key]
    path = resolve_path(spec)
    kwargs: dict[str, Any] = {"dtype": getattr(torch, cfg.get("dtype") or "float32"),
                              "attn_implementation": cfg.get("attn_implementation") or "sdpa"}
    if cfg.get("device_map"):
        kwargs["device_map"] = cfg["device_map"]
        kwargs["offload_folder"] = str(cfg.get("offload_folder") or cache_root() / "offload")
    require_model("model", spec)
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
        require_model("tokenizer", spec)
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
        if need_draft and cfg.get("draft_kind") == "feature_head":
            draft_model = tiny_head_lm(target, seed=tiny.get("seed", 0) + 1)
        else:
            draft_model = draft_lm(draft, target, cfg) if need_draft else None
        return ModelPair(cfg["name"], CausalLM(target, static_mode(cfg)), draft_model, tok, False,
                         [tok.eos_token_id], target.config.vocab_size)
    tok = _load_tokenizer(cfg.get("tokenizer") or cfg["target"])
    draft_model = None
    feature_head = cfg.get("draft_kind") == "feature_head"
    if need_draft:
        if not cfg.get("draft"):
            raise ConfigError(f"model_pair {cfg['name']!r} names no draft model, which this drafter needs")
        if not feature_head:  # a feature head has no tokenizer of its own: it drafts in the target's vocabulary
            check_same_vocabulary(tok, _load_tokenizer(cfg["draft"]), cfg["target"], cfg["draft"])
    target_model = load_model(cfg["target"], cfg)
    if need_draft and feature_head:
        draft_model = head_lm(Path(resolve_path(cfg["draft"])), target_model)
    elif need_draft:
        draft_model = load_model(cfg["draft"], cfg)
    widths = [output_width(target_model)]
    if draft_model is not None:
        widths.append(draft_model.vocab_size if isinstance(draft_model, HeadLM) else output_width(draft_model))
    vocab = min(widths)
    if vocab < len(tok):
        raise TokenizerMismatchError(f"a model's output layer ({vocab} rows) is narrower than the tokenizer "
                                     f"({len(tok)} tokens)")
    if draft_model is not None and not isinstance(draft_model, HeadLM):
        draft_model = draft_lm(draft_model, target_model, cfg)
    return ModelPair(cfg["name"], CausalLM(target_model, static_mode(cfg)), draft_model, tok,
                     bool(cfg.get("chat", False)), eos_ids(tok, target_model), vocab)


def draft_lm(draft_model: Any, target_model: Any, cfg: Mapping[str, Any]) -> CausalLM | MixtureLM:
    """The pair's draft with its own KV cache; with `mix` set, the acceptance dial's mixture with the target."""
    if cfg.get("mix") is None:
        return CausalLM(draft_model, static_mode(cfg))
    return MixtureLM(CausalLM(draft_model, static_mode(cfg)), CausalLM(target_model, static_mode(cfg)),
                     float(cfg["mix"]))


def static_mode(cfg: Mapping[str, Any]) -> str:
    """CausalLM's `static` argument for `model_pair.static_forward` (null: off)."""
    return cfg.get("static_forward") or "off"



def load_pair_tokenizer(cfg: Mapping[str, Any]) -> Any:
    """The tokenizer `load_pair` would give this `model_pair` config, without loading any weights."""
    if str(cfg["target"]).startswith("tiny:"):
        return ByteTokenizer()
    return _load_tokenizer(cfg.get("tokenizer") or cfg["target"])


def pair_context_length(cfg: Mapping[str, Any], need_draft: bool = True) -> int | None:
    """The smallest context (max_position_embeddings) of the pair's models, read from their configs alone."""
    if str(cfg["target"]).startswith("tiny:"):
        return CONTEXT_LENGTH
    from transformers import AutoConfig

    limits = []
    own_config = need_draft and cfg.get("draft") and cfg.get("draft_kind") != "feature_head"
    for spec in [cfg["target"]] + ([cfg["draft"]] if own_config else []):
        try:
            config = AutoConfig.from_pretrained(resolve_path(spec))
        except OSError as err:
            raise unavailable("model config", spec, err) from None
        limits.append(int(getattr(config, "max_position_embeddings", 0) or 0))
    return min((n for n in limits if n), default=None)
