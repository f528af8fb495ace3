"""The model_pair group's value checks (tiny pairs, model specs, attention, dtype, draft kind, device), read from the
configs alone: no model loads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from rsd.errors import ConfigError
from rsd.harness.kinds import is_int, is_number
from rsd.harness.schema import Tiny, from_dict
from rsd.models.source import draft_source, model_source
from rsd.models.spec import STATIC_MODES
from rsd.registry import TINY_MODELS, lookup

DTYPES = ("float32", "float16", "bfloat16", "float64")
TINY_DTYPE = "float32"  # the tiny pairs are built in float32 whatever model_pair.dtype says
BYTE_VOCAB = 258  # the tiny pairs' byte tokenizer: 256 bytes, BOS and EOS
# model_pair.attn_implementation: what transformers accepts (flash attention only on a GPU with its package)
ATTENTION = ("sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention")


def _check_tiny(m: Mapping[str, Any]) -> None:
    target, dtype = m["target"], m.get("dtype")
    if dtype not in (None, TINY_DTYPE):
        raise ConfigError(f"model_pair.dtype={dtype!r} is ignored by the tiny pair {target!r}, which is built in "
                          f"{TINY_DTYPE}: drop the override")
    tiny = m.get("tiny") or {}
    vocab, seed, std = tiny.get("vocab_size", BYTE_VOCAB), tiny.get("seed", 0), tiny.get("init_std", 0.02)
    if not (is_int(vocab) and vocab >= BYTE_VOCAB):
        raise ConfigError(f"model_pair.tiny.vocab_size={vocab!r} must be an integer >= {BYTE_VOCAB} (the byte "
                          "tokenizer's tokens)")
    if not is_int(seed):
        raise ConfigError(f"model_pair.tiny.seed={seed!r} must be an integer (it seeds the random weights)")
    if not (is_number(std, finite=True) and 0 < std <= 1):
        raise ConfigError(f"model_pair.tiny.init_std={std!r} must be a number in (0, 1] (the random weights' std; "
                          "transformers refuses more than 1), e.g. 0.02")


def check_model_pair(m: Mapping[str, Any]) -> None:
    """Raise ConfigError for the first invalid or silently ignored model_pair setting (see the module doc)."""
    target, draft, tokenizer = m.get("target"), m.get("draft"), m.get("tokenizer")
    if is_built(target):
        lookup(TINY_MODELS, target)
        if draft not in (None, target):
            raise ConfigError(f"model_pair.draft={draft!r} is ignored by the tiny pair {target!r}, which builds its "
                              "own draft: drop the override, or set model_pair.target to a real model too")
        if tokenizer is not None:
            raise ConfigError(f"model_pair.tokenizer={tokenizer!r} is ignored by the tiny pair {target!r}, which uses "
                              "a byte tokenizer: drop the override")
        _check_tiny(m)
    elif is_built(draft):
        raise ConfigError(f"model_pair.draft={draft!r} is a tiny model, which pairs only with a tiny target: use "
                          "model_pair=tiny_llama or model_pair=tiny_opt")
    for key, spec in (("target", target), ("draft", draft), ("tokenizer", tokenizer)):
        if isinstance(spec, str):
            model_source(spec).check(key)
    attn = m.get("attn_implementation")
    if attn is not None and attn not in ATTENTION:
        raise ConfigError(f"model_pair.attn_implementation={attn!r} is not an attention rsd runs; use "
                          f"{', '.join(ATTENTION)}, or null for sdpa (flash attention needs a GPU and its package)")
    dtype = m.get("dtype")
    if dtype is not None and dtype != "auto" and dtype not in DTYPES:
        raise ConfigError(f"model_pair.dtype={dtype!r} is not a dtype rsd loads models in; use "
                          f"{', '.join(DTYPES)} (float16/bfloat16 on GPUs), or auto (bfloat16 where this machine "
                          "runs it fast)")
    static = m.get("static_forward")
    if static is not None and static not in STATIC_MODES[1:]:
        raise ConfigError(f"model_pair.static_forward={static!r} is not a static-shape forward mode; use null (eager "
                          f"forwards), {' or '.join(STATIC_MODES[1:])} (benchmarks/README.md, static_compile.py)")
    mix = m.get("mix")
    if mix is not None and not (is_number(mix, finite=True) and 0 <= mix <= 1):
        raise ConfigError(f"model_pair.mix={mix!r} must be a number in [0, 1] (the acceptance dial: 0 drafts from "
                          "the draft, 1 from the target), or null for the plain pair")
    _check_draft_kind(m)
    if mix is not None and not draft:
        raise ConfigError(f"model_pair.mix={mix!r} mixes the draft's logits with the target's, but the pair names no "
                          "draft model")
    _check_device(m.get("device"))


def _check_draft_kind(m: Mapping[str, Any]) -> None:
    """model_pair.draft_kind: lm (a standalone draft) or feature_head (a head over the target's hidden states), and a
    head that fits its target (read from the two configs, before any model loads)."""
    kind = m.get("draft_kind", "lm")
    if kind not in ("lm", "feature_head"):
        raise ConfigError(f"model_pair.draft_kind={kind!r} is not a draft kind; use lm (a standalone draft model) or "
                          "feature_head (an EAGLE-style head over the target's hidden states)")
    if kind != "feature_head":
        return
    for key in ("mix", "static_forward"):
        if m.get(key) is not None:
            raise ConfigError(f"model_pair.{key}={m.get(key)!r} is not supported with draft_kind=feature_head (the "
                              "head reads the target's hidden states from eager forwards): set model_pair."
                              f"{key} to null")
    draft, target = m.get("draft"), m.get("target")
    target_source = model_source(str(target), from_dict(Tiny, m["tiny"], "model_pair.tiny") if m.get("tiny") else None)
    head = draft_source(target_source, str(draft), "feature_head")
    if head.missing():
        raise ConfigError(f"model_pair.draft={draft!r} holds no feature_head.json, but model_pair.draft_kind is "
                          "feature_head: point it at a head trained by experiments/train_feature_head.py, or set "
                          "draft_kind to lm")
    problem = head.fit_problem(target_source)  # read without converting or downloading anything
    if problem:
        raise ConfigError(f"model_pair.draft={draft!r} does not fit the target {target!r}: {problem}; train a head "
                          "for this target (experiments/train_feature_head.py)")


def is_built(spec: Any) -> bool:
    """Whether a model_pair value names a model built from a config (a tiny pair's), not files."""
    return isinstance(spec, str) and model_source(spec).built


def _check_device(device: Any) -> None:
    if device in (None, "auto"):
        return
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"model_pair.device={device!r} is not a torch device; use auto, cpu, cuda or cuda:N") \
            from None
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise ConfigError(f"model_pair.device={device!r} but torch sees no CUDA device on this machine; use "
                              "model_pair.device=auto (CUDA when there is one, else the CPU) or cpu")
        if dev.index is not None and dev.index >= n:
            raise ConfigError(f"model_pair.device={device!r} but torch sees {n} CUDA device(s): use cuda:0 to "
                              f"cuda:{n - 1}, or auto")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"model_pair.device={device!r} but MPS is not available here; use model_pair.device=auto")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"model_pair.device={device!r} is not supported; use auto, cpu, cuda or cuda:N")


__all__ = ["check_model_pair", "is_built"]
