"""The acceptance dial: a draft whose logits are (1 - a) * draft + a * target, a geometric mixture of the two laws.

a = 0 is the shipped draft and a = 1 the target itself (every drafted token is accepted), so one pair sweeps draft
quality on a laptop. Every draft forward also runs the target (with its own KV cache), so token rate and MBSU of a
dial run say nothing about speed; block efficiency, its expectation and the optimum are what it measures.
"""

from __future__ import annotations

import torch

from rsd.models.adapter import CausalLM


def mix_logits(draft: torch.Tensor, target: torch.Tensor, mix: float) -> torch.Tensor:
    """(1 - a) * draft + a * target, with -inf wherever either law gives a token no mass (a trimmed draft head).

    Not torch.lerp: for a < 0.5 it computes draft + a * (target - draft), which is NaN where the draft is -inf.
    """
    if mix == 0.0:  # exact ends: no 0 * (-inf)
        return draft
    if mix == 1.0:
        return target
    return (1.0 - mix) * draft + mix * target


class MixtureLM:
    """A CausalLM stand-in for the dial's draft: two caches (the draft's and a target copy's) kept in step."""

    feature_layers: tuple = ()  # an LM draft reads no target features

    def __init__(self, draft: CausalLM, target: CausalLM, mix: float) -> None:
        if not 0.0 <= mix <= 1.0:
            raise ValueError(f"model_pair.mix must be in [0, 1], got {mix}")
        self.draft, self.target, self.mix = draft, target, mix
        self.device, self.dtype = draft.device, draft.dtype
        self.num_params = draft.num_params + target.num_params  # what a draft forward reads

    def reset(self) -> None:
        self.draft.reset()
        self.target.reset()

    @property
    def cached_len(self) -> int:
        return self.draft.cached_len

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: torch.Tensor | None,
                last: int = 0) -> torch.Tensor:
        """(1 - a) * draft logits + a * target logits over the shared vocabulary (float32)."""
        d = self.draft.forward(tokens, positions, attend, last).float()
        t = self.target.forward(tokens, positions, attend, last).float().to(d.device)
        width = min(d.shape[-1], t.shape[-1])
        return mix_logits(d[:, :width], t[:, :width], self.mix)

    def compact(self, prefix: int, moved: torch.Tensor) -> None:
        self.draft.compact(prefix, moved)
        self.target.compact(prefix, moved)
