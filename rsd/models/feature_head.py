"""An EAGLE-style draft head: a small transformer that drafts from the target's own hidden states.

Entry j of the head's sequence reads token x_j and the target's feature g_{j-1} of the position before it (a zero
vector at j = 0): `fc([embed(x_j); reduce(g_{j-1})])`, then `num_layers` decoder layers of the target's shape. Its
output h_j stands in for the target's feature at j, and `lm_head(h_j)` is the draft law of x_{j+1}. At draft depth
> 1 the head feeds on its own outputs (h of the parent node) in place of the target's features; committed entries are
always rebuilt from the target's true features (docs/algorithms.md#feature-drafts).

`feature_layers` names what the target exposes: `["last"]` is the last hidden state after the final norm (EAGLE-1;
the output then regresses to it and feeds the LM head directly), a list of layer indices concatenates those raw hidden
states (EAGLE-3's low/middle/high; `reduce` maps them to the hidden width and a learned norm precedes the LM head).

The embedding and LM head are the target's, frozen and never copied (zero extra parameters); a trimmed head keeps
only the rows of `head_token_ids` and gives every other token probability 0, which keeps every verifier exact.
The head owns its KV cache (plain tensors, batch 1): no transformers cache API.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

CONFIG_FILE = "feature_head.json"
WEIGHTS_FILE = "feature_head.pt"


@dataclass(frozen=True)
class FeatureHeadConfig:
    """The head's shape and what it reads from the target (stored as feature_head.json next to its weights)."""

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    feature_layers: tuple = ("last",)
    num_layers: int = 1
    rms_norm_eps: float = 1e-5
    rope_theta: float = 100000.0
    head_token_ids: tuple = field(default_factory=tuple)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def feature_width(self) -> int:
        return self.hidden_size * len(self.feature_layers)

    @property
    def reads_last(self) -> bool:
        return tuple(self.feature_layers) == ("last",)

    @classmethod
    def read(cls, path: Path) -> FeatureHeadConfig:
        raw = json.loads((Path(path) / CONFIG_FILE).read_text(encoding="utf-8"))
        raw["feature_layers"] = tuple(raw.get("feature_layers", ("last",)))
        raw["head_token_ids"] = tuple(raw.get("head_token_ids", ()))
        return cls(**raw)

    def write(self, path: Path) -> None:
        data = asdict(self)
        data["feature_layers"], data["head_token_ids"] = list(self.feature_layers), list(self.head_token_ids)
        (Path(path) / CONFIG_FILE).write_text(json.dumps(data) + "\n", encoding="utf-8")


def is_feature_head(path: Path) -> bool:
    """Whether the directory holds a feature head (feature_head.json) rather than a transformers model."""
    return (Path(path) / CONFIG_FILE).is_file()


def fit_problem(cfg: FeatureHeadConfig, target_config: object) -> str | None:
    """Why a head cannot draft for a target with this transformers config (read without loading), or None."""
    hidden = int(getattr(target_config, "hidden_size", 0))
    layers = int(getattr(target_config, "num_hidden_layers", 0))
    vocab = int(getattr(target_config, "vocab_size", 0))
    if cfg.hidden_size != hidden:
        return f"the head's hidden_size {cfg.hidden_size} differs from the target's {hidden}"
    if cfg.vocab_size != vocab:
        return f"the head's vocab_size {cfg.vocab_size} differs from the target's {vocab}"
    bad = [x for x in cfg.feature_layers if x != "last" and not (isinstance(x, int) and 0 <= x <= layers)]
    if bad:
        return f"feature_layers {bad} are not 'last' or a hidden-state index in [0, {layers}] of the target"
    if cfg.head_token_ids and max(cfg.head_token_ids) >= vocab:
        return f"head_token_ids reach {max(cfg.head_token_ids)}, past the target's vocabulary of {vocab}"
    return None


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


def unrolled_masks(seq: torch.Tensor, positions: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """Attention of draft step s (1-based) over the keys of steps 1..s, concatenated [T, s*T].

    A step-s entry at position j is a node at depth s whose chain left the committed prefix after position j - s + 1:
    it sees step-1 keys (true features) at positions <= j - s + 1 and the step-t key at position j - s + t
    (t = 2..s), its drafted ancestors and itself (the training-time test of EAGLE-3).
    """
    same = seq[:, None] == seq[None, :]
    dj = positions[:, None] - positions[None, :]  # query position - key position, within a sequence
    masks = []
    for s in range(1, steps + 1):
        blocks = [same & (dj >= s - 1)]
        blocks += [same & (dj == s - u) for u in range(2, s + 1)]
        masks.append(torch.cat(blocks, -1))
    return masks


def unrolled_outputs(head: FeatureHead, embed: torch.Tensor, batch: dict, steps: int) -> list[torch.Tensor]:
    """The head's outputs [T, h] at draft steps 1..`steps` over packed sequences, teacher-forced: step 1 reads the
    target's features of the previous position, step s > 1 the head's own step-(s-1) output there.

    `batch`: ids [T], positions [T] (restarting per sequence), seq [T] (the sequence of each row) and prev [T, width]
    (the target's features of the previous position, zero at a sequence's first). Training and the engine-agreement
    test both use it: in the engine, a depth-s node whose ancestors are the true next tokens sees exactly this.
    """
    x_emb = embed[batch["ids"]]
    masks = unrolled_masks(batch["seq"], batch["positions"], steps)
    outs, keys, values = [], [[] for _ in head.layers], [[] for _ in head.layers]
    feats, predicted = batch["prev"], False
    for s in range(steps):
        x = head.inputs(x_emb, feats, predicted)
        for li, layer in enumerate(head.layers):
            k, v = layer.project_kv(x, batch["positions"])
            keys[li].append(k)
            values[li].append(v)
            x = layer(x, batch["positions"], torch.cat(keys[li], 1), torch.cat(values[li], 1), masks[s])
        outs.append(x)
        first = batch["seq"] != torch.cat([batch["seq"][:1] - 1, batch["seq"][:-1]])
        feats = torch.cat([x[:1], x[:-1]]).masked_fill(first[:, None], 0.0)  # the previous position's output
        predicted = True
    return outs


def save_head(head: FeatureHead, out: Path, dtype: torch.dtype = torch.float16) -> None:
    """Write the head's config and trainable weights (never the target's) to the directory `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    head.cfg.write(out)
    torch.save({k: v.detach().to(dtype) for k, v in head.state_dict().items()}, out / WEIGHTS_FILE)


def load_head(path: Path, dtype: torch.dtype = torch.float32) -> FeatureHead:
    """The head saved in `path`, in `dtype`."""
    cfg = FeatureHeadConfig.read(path)
    head = FeatureHead(cfg)
    state = torch.load(Path(path) / WEIGHTS_FILE, map_location="cpu", weights_only=True)
    head.load_state_dict(state)
    return head.to(dtype).eval()


def head_lm(path: Path, target: torch.nn.Module) -> HeadLM:
    """A HeadLM for the transformers `target` (its embedding and LM head, on its device and in its dtype)."""
    embed = target.get_input_embeddings().weight.detach()
    lm = target.get_output_embeddings().weight.detach()
    head = load_head(path, embed.dtype).to(embed.device)
    return HeadLM(head, embed, lm)


def head_config_for(target_config: object, feature_layers: tuple = ("last",), num_layers: int = 1,
                    head_token_ids: tuple = ()) -> FeatureHeadConfig:
    """A head of the target's shape (its width, attention heads and MLP width) reading `feature_layers`."""
    heads = int(target_config.num_attention_heads)
    rope_params = getattr(target_config, "rope_parameters", None) or {}
    return FeatureHeadConfig(
        hidden_size=int(target_config.hidden_size), num_attention_heads=heads,
        num_key_value_heads=int(getattr(target_config, "num_key_value_heads", None) or heads),
        intermediate_size=int(getattr(target_config, "intermediate_size", 0) or 4 * target_config.hidden_size),
        vocab_size=int(target_config.vocab_size), feature_layers=tuple(feature_layers), num_layers=num_layers,
        rms_norm_eps=float(getattr(target_config, "rms_norm_eps", 1e-5)),
        rope_theta=float(rope_params.get("rope_theta", getattr(target_config, "rope_theta", 10000.0))),
        head_token_ids=tuple(head_token_ids))


def tiny_head_lm(target: torch.nn.Module, seed: int, feature_layers: tuple = ("last",)) -> HeadLM:
    """A deterministic random-weight head for a tiny target (the tests' and the Monte Carlo oracle's feature draft)."""
    torch.manual_seed(seed)
    head = FeatureHead(head_config_for(target.config, feature_layers)).float()
    return HeadLM(head, target.get_input_embeddings().weight.detach(), target.get_output_embeddings().weight.detach())


def init_from_target(head: FeatureHead, target: torch.nn.Module, layer: int | None = None) -> None:
    """Initialise the head's decoder layers from a target layer (default: the last), as EAGLE's training does."""
    src = target.model.layers[-1 if layer is None else layer]
    names = {"input_norm": src.input_layernorm, "q": src.self_attn.q_proj, "k": src.self_attn.k_proj,
             "v": src.self_attn.v_proj, "o": src.self_attn.o_proj, "post_norm": src.post_attention_layernorm,
             "gate": src.mlp.gate_proj, "up": src.mlp.up_proj, "down": src.mlp.down_proj}
    with torch.no_grad():
        for dst in head.layers:
            for name, module in names.items():
                getattr(dst, name).weight.copy_(module.weight)
        h = head.cfg.hidden_size
        head.fc.weight.zero_()
        head.fc.weight[:, h:].copy_(torch.eye(h))  # start as "pass the feature through"
        head.fc.bias.zero_()

