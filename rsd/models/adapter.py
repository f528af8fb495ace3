"""The one place that talks to transformers' forward and KV cache (DESIGN.md: environment facts).

A tree forward passes an additive float mask (0 / dtype min) of shape (1, 1, q, cached + q) and explicit position
ids: a boolean mask is silently ignored by eager attention, and missing position ids give wrong Llama positions
(docs/algorithms.md#pitfalls, 5). Keeping an accepted path is an index_select on the sequence dim of every cache
layer (pitfall 6).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel


class CausalLM:
    """A causal LM with one KV cache (batch 1): tree-masked forward and cache compaction by gather."""

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.cache: DynamicCache | None = None
        self.num_params = sum(p.numel() for p in model.parameters())
        self.context_length = int(getattr(model.config, "max_position_embeddings", 0) or 0)

    def reset(self) -> None:
        """Forget the cache (start of a new sequence)."""
        self.cache = DynamicCache(config=self.model.config)

    @property
    def cached_len(self) -> int:
        return 0 if self.cache is None else self.cache.get_seq_length()

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: torch.Tensor) -> torch.Tensor:
        """Logits [q, V] for `tokens` [q] at `positions` [q]; `attend` [q, cached + q] says who sees whom."""
        if self.cache is None:
            self.reset()
        if attend.shape != (len(tokens), self.cached_len + len(tokens)):
            raise ValueError(f"mask shape {tuple(attend.shape)} != ({len(tokens)}, {self.cached_len + len(tokens)})")
        mask = torch.zeros(attend.shape, dtype=self.dtype, device=self.device)
        mask.masked_fill_(~attend.to(self.device), torch.finfo(self.dtype).min)
        out = self.model(
            input_ids=tokens.to(self.device)[None],
            position_ids=positions.to(self.device)[None],
            attention_mask=mask[None, None],
            cache=self.cache,
            use_cache=True,
        )
        return out.logits[0]

    def keep(self, slots: torch.Tensor) -> None:
        """Keep only the cache entries at `slots` (in that order), dropping the rest."""
        for layer in self.cache.layers:  # layers may sit on different GPUs under device_map="auto"
            index = slots.to(layer.keys.device)
            layer.keys = layer.keys.index_select(2, index)
            layer.values = layer.values.index_select(2, index)
