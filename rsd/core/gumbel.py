"""Sampling without replacement by Gumbel keys: Gumbel-top-k and a stochastic beam search step
(docs/algorithms.md#gumbel-top-k, #stochastic-beam-search)."""

from __future__ import annotations

import torch


def gumbel(shape: torch.Size | tuple[int, ...], gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """Standard Gumbel noise -log(-log U) in float64, drawn on the generator's device and moved to `device`."""
    u = torch.rand(shape, generator=gen, device=gen.device, dtype=torch.float64)
    return (-torch.log(-torch.log(u))).to(device)


def gumbel_topk(probs: torch.Tensor, k: int, gen: torch.Generator) -> list[list[int]]:
    """For each row of probs [n, V], up to k draws without replacement, in draw order (descending key).

    Keys are log p + Gumbel; zero-probability tokens have key -inf and are never drawn, so a row with fewer than
    k tokens of positive mass yields fewer draws.
    """
    keys = probs.double().log() + gumbel(probs.shape, gen, probs.device)
    top = keys.topk(min(k, probs.shape[-1]), dim=-1)
    # One host read for every row; the finite keys come first (descending order).
    indices, finite = torch.stack([top.indices, torch.isfinite(top.values).long()]).tolist()
    return [row[: sum(ok)] for row, ok in zip(indices, finite)]


def truncated_gumbel_shift(parent_key: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """G_sx = -log(exp(-G_s) - exp(-Z_s) + exp(-g_sx)) in a stable form; the row max becomes G_s
    (docs/algorithms.md#stochastic-beam-search)."""
    z = keys.max(-1, keepdim=True).values
    u = parent_key[:, None] - keys + torch.log1p(-torch.exp(keys - z))
    return parent_key[:, None] - u.clamp_min(0) - torch.log1p(torch.exp(-u.abs()))


def sbs_step(phi: torch.Tensor, key: torch.Tensor, logp: torch.Tensor, width: int, gen: torch.Generator
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of stochastic beam search over beams (phi [n], key [n]) with log-probs [n, V].

    Returns (parent beam, token, phi, key) of the kept pairs — the `width` largest truncated keys over all beams,
    in descending key order; pairs with key -inf (zero probability) are never kept.
    """
    phi_sx = phi[:, None] + logp.double()
    g = phi_sx + gumbel(logp.shape, gen, logp.device)
    # The shift is increasing in g within a beam, so every kept pair is among its beam's `width` largest raw keys:
    # shift only those (the row max, which the shift needs, is the first of them).
    raw = g.topk(min(width, g.shape[-1]), dim=-1)
    shifted = truncated_gumbel_shift(key.double(), raw.values)
    top = shifted.flatten().topk(min(width, shifted.numel()))
    kept = int(torch.isfinite(top.values).sum())  # the finite keys come first (descending order)
    flat, values = top.indices[:kept], top.values[:kept]
    parent = flat // raw.indices.shape[-1]
    token = raw.indices[parent, flat % raw.indices.shape[-1]]
    return parent, token, phi_sx[parent, token], values
