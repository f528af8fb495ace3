"""The feature head's config: its shape and what it reads from the target (feature_head.json), and whether it fits a
target's transformers config."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

CONFIG_FILE = "feature_head.json"

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
