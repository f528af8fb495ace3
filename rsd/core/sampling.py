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
    """Processed next-token distribution [..., V]: one-hot argmax when greedy, else T, top-k, top-p. float32, or
    float64 for float64 logits (the exact oracle's table models, whose enumeration is exact to 1e-12).

    The same law as transformers' generate() (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper in that
    order, then softmax), computed with the same operations. Top-k keeps every token tied with the k-th logit.
    Top-p keeps the smallest most-likely set whose mass reaches top_p: a token is dropped iff it and all less likely
    tokens together hold at most 1 - top_p; the most likely token always stays. Among tied logits the lower token
    id counts as less likely (transformers' ascending stable sort), so it is the one dropped at the boundary.
    """
    logits = logits if logits.dtype == torch.float64 else logits.float()
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    logits = logits / params.temperature
    if 0 < params.top_k < logits.shape[-1]:
        kth = logits.topk(params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        ascending, order = logits.sort(dim=-1, stable=True)
        drop_sorted = ascending.softmax(-1).cumsum(-1) <= 1 - params.top_p
        drop_sorted[..., -1] = False
        logits = logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
    return torch.softmax(logits, dim=-1)


def prompt_generator(seed: int, prompt_id: str, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator seeded from (seed, prompt_id) alone, so a prompt's output never depends on the prompts before it."""
    digest = hashlib.sha256(f"{seed}:{prompt_id}".encode()).digest()
    gen = torch.Generator(device=device)
    gen.manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
    return gen


def uniform(gen: torch.Generator, n: int = 1) -> torch.Tensor:
    """n draws from U(0, 1] on the generator's device (never 0: 'accept iff u * b <= a' skips zero-mass tokens)."""
    return 1.0 - torch.rand(n, generator=gen, device=gen.device, dtype=torch.float64)


def multinomial(probs: torch.Tensor, n: int, gen: torch.Generator) -> torch.Tensor:
    """n i.i.d. tokens from a probability vector, drawn with the generator, left on its device (no host read)."""
    return torch.multinomial(probs.float().to(gen.device), n, replacement=True, generator=gen)


def sample_iid(probs: torch.Tensor, n: int, gen: torch.Generator) -> list[int]:
    """n i.i.d. tokens from a probability vector, drawn with the generator on its device."""
    return multinomial(probs, n, gen).tolist()


def sample_iid_rows(probs: torch.Tensor, counts: list[int], gen: torch.Generator) -> list[list[int]]:
    """counts[i] i.i.d. tokens from each row i of probs [n, V]: the same draws, in the same order, as `sample_iid` row
    by row, with one host read."""
    flat = torch.cat([multinomial(p, n, gen) for p, n in zip(probs, counts)]).tolist()
    starts = [sum(counts[:i]) for i in range(len(counts) + 1)]
    return [flat[starts[i]: starts[i + 1]] for i in range(len(counts))]


def sample(probs: torch.Tensor, gen: torch.Generator) -> int:
    """One token from a probability vector."""
    return sample_iid(probs, 1, gen)[0]


def most_likely(probs: torch.Tensor, m: int) -> list[tuple[list[int], list[float]]]:
    """For each row of probs [n, V]: its min(m, support) most likely tokens and their probabilities, in (-p, id)
    order (ties go to the lower id, whatever topk picks at the boundary); one host read, two at a positive tie that
    straddles the boundary."""
    top = probs.topk(min(m, probs.shape[-1]), dim=-1)
    kth = top.values[:, -1:]
    outside = (probs == kth).sum(-1, keepdim=True) - (top.values == kth).sum(-1, keepdim=True)
    packed = torch.cat([top.values.double(), top.indices.double(), outside.double()], -1).tolist()
    out = []
    for r, row in enumerate(packed):
        k = len(row) // 2
        vals, idx, kth_value = row[:k], [int(i) for i in row[k: 2 * k]], row[k - 1]
        chosen = sorted((-v, i) for v, i in zip(vals, idx) if v > 0)
        if row[-1] > 0 and kth_value > 0:  # topk kept some tied tokens and left out others: take the lowest ids
            above = [(v, i) for v, i in chosen if -v > kth_value]
            tied = (probs[r] == probs[r, idx[-1]]).nonzero().flatten()[: k - len(above)].tolist()
            chosen = above + [(-kth_value, i) for i in tied]
        out.append(([i for _, i in chosen], [-v for v, _ in chosen]))
    return out
