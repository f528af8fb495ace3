"""Where a head's weights come from: its files (save_head, load_head, head_lm over a loaded target), a seeded random
draw for a tiny target, or a target's decoder layer (init_from_target)."""

from __future__ import annotations

from pathlib import Path

import torch

from rsd.models.feature_head.config import FeatureHeadConfig, head_config_for
from rsd.models.feature_head.lm import HeadLM
from rsd.models.feature_head.modules import FeatureHead

WEIGHTS_FILE = "feature_head.pt"


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


def head_num_params(cfg: FeatureHeadConfig) -> int:
    """The parameters a head of this config trains and stores (built on the meta device: shapes only)."""
    with torch.device("meta"):
        return sum(p.numel() for p in FeatureHead(cfg).parameters())


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
