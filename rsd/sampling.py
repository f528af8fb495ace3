"""The sampling transform (temperature, top-k, top-p) shared by target and draft, and seeded randomness."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from rsd.errors import ConfigError


@dataclass(frozen=True)
class SamplingParams:
    """Temperature 0 means greedy; top_k 0 and top_p 1.0 disable those filters."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ConfigError(f"sampling.temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ConfigError(f"sampling.top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"sampling.top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def probs_from_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Processed next-token distribution [..., V] (float32): one-hot argmax when greedy, else T, top-k, top-p."""
    logits = logits.float()
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / params.temperature
    if 0 < params.top_k < logits.shape[-1]:
        kth = logits.topk(params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p: a token stays if the mass before it is < top_p
        drop_sorted = (sorted_probs.cumsum(-1) - sorted_probs) >= params.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def prompt_generator(seed: int, prompt_id: str, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator seeded from (seed, prompt_id) alone, so a prompt's output never depends on the prompts before it."""
    digest = hashlib.sha256(f"{seed}:{prompt_id}".encode()).digest()
    gen = torch.Generator(device=device)
    gen.manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
    return gen


def uniform(gen: torch.Generator, n: int = 1, device: torch.device | str = "cpu") -> torch.Tensor:
    """n draws from U(0, 1] (never 0, so 'accept iff u * b <= a' can never accept a zero-probability token)."""
    return 1.0 - torch.rand(n, generator=gen, device=device, dtype=torch.float64)


def sample(probs: torch.Tensor, gen: torch.Generator) -> int:
    """One token from a probability vector."""
    return int(torch.multinomial(probs, 1, generator=gen).item())
