"""The feature head's nn modules: rotary embedding, a Llama decoder layer over batch 1, and the trainable head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rsd.models.feature_head.config import FeatureHeadConfig


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary position embedding of x [heads, q, dim] at `positions` [q] (Llama's rotate-half convention)."""
    dim = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
    ang = positions.to(x.device, torch.float32)[:, None] * inv[None]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype), torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
    half = dim // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


class DecoderLayer(nn.Module):
    """One Llama decoder layer (pre-norm attention with grouped KV heads and RoPE, SwiGLU MLP) over batch 1."""

    def __init__(self, cfg: FeatureHeadConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.cfg = cfg
        self.input_norm = nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.q = nn.Linear(h, cfg.num_attention_heads * d, bias=False)
        self.k = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.v = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.o = nn.Linear(cfg.num_attention_heads * d, h, bias=False)
        self.post_norm = nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.gate = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.up = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, h, bias=False)

    def project_kv(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [kv_heads, q, dim] of the rows x [q, h] at `positions`."""
        n, d = self.cfg.num_key_value_heads, self.cfg.head_dim
        y = self.input_norm(x)
        k = self.k(y).view(-1, n, d).transpose(0, 1)
        v = self.v(y).view(-1, n, d).transpose(0, 1)
        return rope(k, positions, self.cfg.rope_theta), v

    def forward(self, x: torch.Tensor, positions: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor | None) -> torch.Tensor:
        """x [q, h] attending to `keys`/`values` [kv_heads, s, dim] under the boolean `mask` [q, s] (None: causal
        with keys == the rows' own)."""
        heads, d = self.cfg.num_attention_heads, self.cfg.head_dim
        q = rope(self.q(self.input_norm(x)).view(-1, heads, d).transpose(0, 1), positions, self.cfg.rope_theta)
        group = heads // self.cfg.num_key_value_heads
        k, v = keys.repeat_interleave(group, 0), values.repeat_interleave(group, 0)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        x = x + self.o(attn.transpose(0, 1).reshape(-1, heads * d))
        y = self.post_norm(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class FeatureHead(nn.Module):
    """The trainable part of the head (fc, reduce, decoder layers, output norm); the target's embedding and LM head
    are passed in, frozen, by reference."""

    def __init__(self, cfg: FeatureHeadConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden_size
        self.reduce = nn.Identity() if cfg.reads_last else nn.Linear(cfg.feature_width, h, bias=False)
        self.fc = nn.Linear(2 * h, h, bias=True)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.out_norm = nn.Identity() if cfg.reads_last else nn.RMSNorm(h, eps=cfg.rms_norm_eps)

    def inputs(self, embeds: torch.Tensor, feats: torch.Tensor, predicted: bool) -> torch.Tensor:
        """fc([embed(x_j); g_{j-1}]) for rows of token embeddings and the previous position's features: the
        target's (`predicted` False, width feature_width) or the head's own outputs (width hidden_size)."""
        g = feats if predicted or self.cfg.reads_last else self.reduce(feats)
        return self.fc(torch.cat([embeds, g.to(embeds.dtype)], -1))

    def output(self, h: torch.Tensor) -> torch.Tensor:
        """The hidden state that feeds the LM head."""
        return self.out_norm(h)
