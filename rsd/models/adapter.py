"""The one place that talks to transformers' forward and KV cache.

A tree forward passes an additive float mask (0 / dtype min) of shape (1, 1, q, cached + q) and explicit position
ids: a boolean mask is silently ignored by eager attention, and missing position ids give wrong Llama positions
(docs/algorithms.md#pitfalls, 5). A purely causal forward (prefill, a chain) passes no mask and lets the model mask
causally.

The KV cache is rsd's own (rsd.models.kv_cache, no transformers internals), a preallocated buffer per layer
(`BufferLayer`): a forward writes its new entries in place and attention reads a view of the filled part, so
appending costs O(new tokens), not a concatenation of the whole cache. Keeping an accepted path (pitfall 6) moves
the path's entries into place behind the kept prefix and crops: it costs O(path), not a gather of the whole context.

With `static` set ("buffers", or "compile" for torch.compile), forwards of up to 32 tokens run at fixed shapes: the
queries are padded to a power of two, the cache is one buffer per layer of fixed capacity (256, doubled when full)
written at slot indices, and attention reads the whole buffer under a mask that hides unwritten, stale and padding
slots. Each (padded q, capacity) compiles once per model; longer forwards (a prefill) run uncompiled at their shape.
On CUDA the compiled forwards are also captured as CUDA graphs (torch.compile's "reduce-overhead" mode).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

import torch

from rsd.models.kv_cache import BufferLayer, KVCache, SlotLayer
from rsd.models.spec import STATIC_MODES

if TYPE_CHECKING:  # annotations only: importing transformers' model classes costs seconds at start-up
    from transformers import PretrainedConfig, PreTrainedModel

PAD_QS = (1, 2, 4, 8, 16, 32)  # a static forward pads its queries to one of these; a longer one runs at its own shape
MIN_CAPACITY = 256
RECOMPILE_LIMIT = 64  # every CausalLM, padded q and capacity is one more guard set on the same compiled code


def cache_kwarg(model: PreTrainedModel) -> str:
    """The name under which `model`'s forward takes its cache: `cache` in newer transformers (5.24 has it),
    `past_key_values` in older ones (5.0). Read off the base model, whose forward names its arguments (a head's
    forward may take **kwargs)."""
    return "cache" if "cache" in inspect.signature(model.base_model.forward).parameters else "past_key_values"


def full_attention_only(config: PretrainedConfig) -> bool:
    """Whether every layer of a decoder `config` attends to the whole context (no sliding window or other kind)."""
    kinds = getattr(config, "layer_types", None)
    if kinds is not None:
        return all(kind == "full_attention" for kind in kinds)
    return getattr(config, "sliding_window", None) is None or getattr(config, "use_sliding_window", True) is False


class CausalLM:
    """A causal LM with one KV cache (batch 1): tree-masked forward and cache compaction by move-and-crop."""

    feature_layers: tuple = ()  # the target features it reads as a draft: none (a feature head declares its own)

    def __init__(self, model: PreTrainedModel, static: str = "off") -> None:
        if static not in STATIC_MODES:
            raise ValueError(f"static={static!r}: use one of {', '.join(STATIC_MODES)}")
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.cache: KVCache | None = None
        self._cache_kwarg = cache_kwarg(model)
        self.features: torch.Tensor | None = None  # the last forward's hidden states, when a forward asked for them
        self.num_params = sum(p.numel() for p in model.parameters())
        self._zero = torch.zeros((), dtype=self.dtype, device=self.device)
        self._neg = torch.full((), torch.finfo(self.dtype).min, dtype=self.dtype, device=self.device)
        self.static = static
        self.length = 0  # filled slots of a static cache
        self.capacity = MIN_CAPACITY
        self.slots = torch.zeros(0, dtype=torch.long, device=self.device)
        self._slot_bufs: dict[int, torch.Tensor] = {}
        # On CUDA, "reduce-overhead" also captures each compiled shape as a CUDA graph (one launch per forward).
        mode = "reduce-overhead" if self.device.type == "cuda" else "default"
        self._padded = torch.compile(self._run, dynamic=False, mode=mode) if static == "compile" else self._run

    def reset(self) -> None:
        """Forget the cache (start of a new sequence)."""
        text = self.model.config.get_text_config(decoder=True)
        if self.static != "off":
            # one cache object for the model's life: a compiled forward guards on it, so a new one would recompile
            if self.cache is None:
                if not full_attention_only(text):
                    raise ValueError("static forwards support full-attention layers only (this model has others): "
                                     "set model_pair.static_forward to null")
                self.cache = KVCache(text.num_hidden_layers, lambda: SlotLayer(self))
            self.length = 0
            return
        self.cache = KVCache(text.num_hidden_layers, BufferLayer)

    def _cached(self) -> dict[str, KVCache]:
        """The cache keyword argument of a forward."""
        return {self._cache_kwarg: self.cache}

    @property
    def cached_len(self) -> int:
        if self.static != "off":
            return self.length
        return 0 if self.cache is None else self.cache.get_seq_length()

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: torch.Tensor | None,
                last: int = 0, features: tuple = ()) -> torch.Tensor:
        """Logits [q, V] (or of the last `last` tokens) for `tokens` [q] at `positions` [q].

        `attend` [q, cached + q] says who sees whom; None means plain causal attention over the whole cache (the
        caller guarantees that is what the tree needs: a chain, or committed tokens only). With `features` (what a
        feature-head draft reads: "last", the final hidden state after the norm, or hidden-state indices), the
        forward also leaves those features of all q tokens, concatenated, in `self.features` [q, width].
        """
        if self.cache is None:
            self.reset()
        mask = None
        if attend is not None:
            if attend.shape != (len(tokens), self.cached_len + len(tokens)):
                raise ValueError(f"mask shape {tuple(attend.shape)} != ({len(tokens)}, "
                                 f"{self.cached_len + len(tokens)})")
            attend = attend.to(self.device, non_blocking=True)
        if self.static != "off":
            if features:
                raise ValueError("a feature-head draft reads the target's hidden states, which static forwards do "
                                 "not expose: set model_pair.static_forward to null")
            return self._static_forward(tokens, positions, attend, last)
        if attend is not None:
            mask = torch.where(attend, self._zero, self._neg)[None, None]
        ids = tokens.to(self.device, non_blocking=True)[None]
        pos = positions.to(self.device, non_blocking=True)[None]
        if features:
            return self._feature_forward(ids, pos, mask, last, tuple(features))
        out = self.model(input_ids=ids, position_ids=pos, attention_mask=mask, use_cache=True,
                         logits_to_keep=last, **self._cached())
        return out.logits[0]

    def _feature_forward(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None, last: int,
                         features: tuple) -> torch.Tensor:
        """The eager forward through the base model, keeping the requested hidden states in `self.features`."""
        layers = [f for f in features if f != "last"]
        out = self.model.base_model(input_ids=ids, position_ids=pos, attention_mask=mask,
                                    use_cache=True, output_hidden_states=bool(layers), **self._cached())
        hidden = out.last_hidden_state[0]
        self.features = torch.cat([hidden if f == "last" else out.hidden_states[f][0].to(hidden.device)
                                   for f in features], -1)
        rows = hidden[-last:] if last else hidden
        return self.model.get_output_embeddings()(rows)

    def _run(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, last: int = 0) -> torch.Tensor:
        return self.model(input_ids=ids, position_ids=pos, attention_mask=mask, use_cache=True,
                          logits_to_keep=last, **self._cached()).logits

    def _static_forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: torch.Tensor | None,
                        last: int) -> torch.Tensor:
        """CausalLM.forward at fixed shapes: k tokens written to slots [length, length + k), padded to q slots."""
        k, start = len(tokens), self.length
        q = next((p for p in PAD_QS if p >= k), k)
        if start + q > self.capacity:
            while start + q > self.capacity:
                self.capacity *= 2
            for layer in self.cache.layers:
                layer.grow(self.capacity)
        if attend is None:
            attend = torch.ones(k, start + k, dtype=torch.bool, device=self.device).tril(start)
        allowed = torch.zeros(q, self.capacity, dtype=torch.bool, device=self.device)
        allowed[:k, : start + k] = attend
        pad = torch.arange(k, q, device=self.device)
        allowed[pad, start + pad] = True  # a padding row sees its own slot only; no real row sees a padding slot
        mask = torch.where(allowed, self._zero, self._neg)[None, None]
        ids = torch.zeros(1, q, dtype=torch.long, device=self.device)
        ids[0, :k] = tokens.to(self.device, non_blocking=True)
        pos = torch.zeros(1, q, dtype=torch.long, device=self.device)
        pos[0, :k] = positions.to(self.device, non_blocking=True)
        if q not in self._slot_bufs:
            self._slot_bufs[q] = torch.zeros(q, dtype=torch.long, device=self.device)
        self.slots = torch.arange(start, start + q, device=self.device, out=self._slot_bufs[q])
        if q in PAD_QS:
            if self.static == "compile" and self.device.type == "cuda":
                torch.compiler.cudagraph_mark_step_begin()  # the previous forward's outputs are consumed by now
            with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
                logits = self._padded(ids, pos, mask)[0, :k]
            logits = logits[k - last:] if last else logits
        else:
            logits = self._run(ids, pos, mask, last)[0]
        self.length = start + k
        return logits

    @torch.inference_mode()
    def compact(self, prefix: int, moved: torch.Tensor) -> None:
        """Keep cache entries [0, prefix) followed by the entries at `moved` (ascending, >= prefix): O(len(moved))."""
        self.cache.compact(prefix, moved.to(self.device))  # one host-to-device copy
        if self.static != "off":
            self.length = prefix + len(moved)
