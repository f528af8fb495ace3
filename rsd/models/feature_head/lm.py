"""HeadLM: a feature head with its own KV cache in the engine's CausalLM interface, plus the features it reads."""

from __future__ import annotations

import torch

from rsd.models.feature_head.modules import FeatureHead


class HeadLM:
    """A feature head with its own KV cache, in the engine's CausalLM interface plus the features it reads.

    `forward(tokens, positions, attend, last, features, predicted)` drafts rows whose previous-position features are
    `features` [q, width]; it returns logits [rows, V] and stores the head's outputs of the same rows in
    `self.outputs` (the features a child node at the next depth reads).
    """

    reads_features = True

    def __init__(self, head: FeatureHead, embed: torch.Tensor, lm_head: torch.Tensor) -> None:
        self.head = head.eval()
        self.cfg = head.cfg
        self.feature_layers = tuple(head.cfg.feature_layers)
        self.feature_width = head.cfg.feature_width
        self.device = embed.device
        self.dtype = embed.dtype
        self.embed = embed
        ids = torch.tensor(self.cfg.head_token_ids, dtype=torch.long, device=embed.device)
        self.head_ids = ids if len(ids) else None
        self.lm_weight = lm_head[ids] if len(ids) else lm_head
        self.vocab_size = self.cfg.vocab_size
        # Reused target weights (embedding, LM head) read nothing extra in a memory-bound step: counted as zero.
        self.num_params = sum(p.numel() for p in head.parameters())
        self.outputs: torch.Tensor | None = None
        self.reset()

    def reset(self) -> None:
        n, d = self.cfg.num_key_value_heads, self.cfg.head_dim
        self.length = 0
        self.keys = [torch.empty(n, 256, d, dtype=self.dtype, device=self.device) for _ in self.head.layers]
        self.values = [torch.empty_like(k) for k in self.keys]

    @property
    def cached_len(self) -> int:
        return self.length

    def _grow(self, need: int) -> None:
        if need > self.keys[0].shape[1]:
            cap = max(256, 2 * need)
            for buf in (self.keys, self.values):
                for i, old in enumerate(buf):
                    new = old.new_empty(old.shape[0], cap, old.shape[2])
                    new[:, : self.length] = old[:, : self.length]
                    buf[i] = new

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Draft logits over the full vocabulary (-inf outside a trimmed head) for head outputs h [rows, hidden]."""
        out = self.head.output(h) @ self.lm_weight.T
        if self.head_ids is None:
            return out
        full = out.new_full((out.shape[0], self.vocab_size), float("-inf"))
        full[:, self.head_ids] = out
        return full

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: torch.Tensor | None, last: int = 0,
                features: torch.Tensor | None = None, predicted: bool = False) -> torch.Tensor:
        """Logits [q or last, V] for `tokens` [q] at `positions` [q] reading `features` [q, width] (see the class)."""
        if features is None or len(features) != len(tokens):
            raise ValueError(f"a feature head needs one feature row per token ({len(tokens)}), got "
                             f"{None if features is None else len(features)}")
        q = len(tokens)
        start = self.length
        if attend is not None and attend.shape != (q, start + q):
            raise ValueError(f"mask shape {tuple(attend.shape)} != ({q}, {start + q})")
        self._grow(start + q)
        tokens, positions = tokens.to(self.device), positions.to(self.device)
        x = self.head.inputs(self.embed[tokens], features.to(self.device, self.dtype), predicted)
        mask = None if attend is None else attend.to(self.device)
        if mask is None and start:
            mask = torch.ones(q, start + q, dtype=torch.bool, device=self.device).tril(start)
        for i, layer in enumerate(self.head.layers):
            k, v = layer.project_kv(x, positions)
            self.keys[i][:, start: start + q] = k
            self.values[i][:, start: start + q] = v
            x = layer(x, positions, self.keys[i][:, : start + q], self.values[i][:, : start + q], mask)
        self.length = start + q
        rows = x[-last:] if last else x
        self.outputs = rows
        return self.logits(rows)

    def compact(self, prefix: int, moved: torch.Tensor) -> None:
        """Keep entries [0, prefix) then those at `moved` (ascending, >= prefix)."""
        moved = moved.to(self.device)
        for buf in (*self.keys, *self.values):
            if len(moved):
                buf[:, prefix: prefix + len(moved)] = buf.index_select(1, moved)
        self.length = prefix + len(moved)
