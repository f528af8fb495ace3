"""The one place that talks to transformers' forward and KV cache.

A tree forward passes an additive float mask (0 / dtype min) of shape (1, 1, q, cached + q) and explicit position
ids: a boolean mask is silently ignored by eager attention, and missing position ids give wrong Llama positions
(docs/algorithms.md#pitfalls, 5). A purely causal forward (prefill, a chain) passes no mask and lets the model mask
causally.

The KV cache is a preallocated buffer per layer (`BufferLayer`): a forward writes its new entries in place and
attention reads a view of the filled part, so appending costs O(new tokens), not a concatenation of the whole
cache. Keeping an accepted path (pitfall 6) moves the path's entries into place behind the kept prefix and crops: it
costs O(path), not a gather of the whole context.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer


class BufferLayer(DynamicLayer):
    """A DynamicLayer whose keys/values are views of a buffer grown by doubling (batch 1, seq dim -2)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._kbuf: torch.Tensor | None = None
        self._vbuf: torch.Tensor | None = None
        self.length = 0

    def _view(self) -> None:
        self.keys = self._kbuf[:, :, : self.length]
        self.values = self._vbuf[:, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new entries after the filled part (growing the buffer when full); return the filled views."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        need = self.length + key_states.shape[-2]
        if self._kbuf is None or need > self._kbuf.shape[-2]:
            cap = max(256, 2 * need)
            kbuf = key_states.new_empty((*key_states.shape[:-2], cap, key_states.shape[-1]))
            vbuf = value_states.new_empty((*value_states.shape[:-2], cap, value_states.shape[-1]))
            if self.length:
                kbuf[:, :, : self.length] = self._kbuf[:, :, : self.length]
                vbuf[:, :, : self.length] = self._vbuf[:, :, : self.length]
            self._kbuf, self._vbuf = kbuf, vbuf
        self._kbuf[:, :, self.length: need] = key_states
        self._vbuf[:, :, self.length: need] = value_states
        self.length = need
        self._view()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def reset(self) -> None:
        self.length = 0
        self._kbuf = self._vbuf = None
        super().reset()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("BufferLayer.crop takes a negative count (tokens to remove from the end)")
        self.length = max(0, self.length + tokens_to_remove)
        if self._kbuf is not None:
            self._view()

    def compact(self, prefix: int, moved: torch.Tensor) -> None:
        """Keep entries [0, prefix) and then the entries at `moved` (ascending, all >= prefix), dropping the rest."""
        m = len(moved)
        if m:
            idx = moved.to(self._kbuf.device)
            # index_select copies the sources first, so overlapping source/destination ranges are safe
            self._kbuf[:, :, prefix: prefix + m] = self._kbuf.index_select(2, idx)
            self._vbuf[:, :, prefix: prefix + m] = self._vbuf.index_select(2, idx)
        self.length = prefix + m
        self._view()


class CausalLM:
    """A causal LM with one KV cache (batch 1): tree-masked forward and cache compaction by move-and-crop."""

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.cache: DynamicCache | None = None
        self.num_params = sum(p.numel() for p in model.parameters())
        self._zero = torch.zeros((), dtype=self.dtype, device=self.device)
        self._neg = torch.full((), torch.finfo(self.dtype).min, dtype=self.dtype, device=self.device)

    def reset(self) -> None:
        """Forget the cache (start of a new sequence)."""
        self.cache = DynamicCache(config=self.model.config)
        # Plain full-attention layers get the in-place buffer; other layer kinds (sliding windows) stay as they are.
        self.cache.layers = [BufferLayer() if type(layer) is DynamicLayer else layer for layer in self.cache.layers]

    @property
    def cached_len(self) -> int:
        return 0 if self.cache is None else self.cache.get_seq_length()

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: torch.Tensor | None,
                last: int = 0) -> torch.Tensor:
        """Logits [q, V] (or of the last `last` tokens) for `tokens` [q] at `positions` [q].

        `attend` [q, cached + q] says who sees whom; None means plain causal attention over the whole cache (the
        caller guarantees that is what the tree needs: a chain, or committed tokens only).
        """
        if self.cache is None:
            self.reset()
        mask = None
        if attend is not None:
            if attend.shape != (len(tokens), self.cached_len + len(tokens)):
                raise ValueError(f"mask shape {tuple(attend.shape)} != ({len(tokens)}, "
                                 f"{self.cached_len + len(tokens)})")
            attend = attend.to(self.device, non_blocking=True)
            mask = torch.where(attend, self._zero, self._neg)[None, None]
        out = self.model(
            input_ids=tokens.to(self.device, non_blocking=True)[None],
            position_ids=positions.to(self.device, non_blocking=True)[None],
            attention_mask=mask,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=last,
        )
        return out.logits[0]

    @torch.inference_mode()
    def compact(self, prefix: int, moved: torch.Tensor) -> None:
        """Keep cache entries [0, prefix) followed by the entries at `moved` (ascending, >= prefix): O(len(moved))."""
        moved = moved.to(self.device)  # one host-to-device copy; a no-op for layers on the model's first device
        for layer in self.cache.layers:  # layers may sit on different GPUs under device_map="auto"
            if isinstance(layer, BufferLayer):
                layer.compact(prefix, moved)
            else:
                index = torch.cat([torch.arange(prefix, device=moved.device), moved]).to(layer.keys.device)
                layer.keys = layer.keys.index_select(2, index)
                layer.values = layer.values.index_select(2, index)
