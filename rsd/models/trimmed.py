"""A Llama draft whose output head covers only a subset of the target's vocabulary (a trimmed head).

The head's N rows are the N target tokens the draft may propose; every other token gets logit -inf, i.e. draft
probability 0. That keeps every verifier lossless (a zero-mass token is simply never drafted; the residual laws
carry the target's mass there) and moves the compute of a 49k-row head into the draft's body. Inputs outside the N
tokens share one extra embedding row (index N). The model loads with `AutoModelForCausalLM.from_pretrained` once
this module is imported (rsd.models imports it), and returns logits over the full target vocabulary.
"""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM


class TrimmedLlamaConfig(LlamaConfig):
    """LlamaConfig plus `head_token_ids` (the N target ids of the head's rows) and `full_vocab_size` (the
    target's vocabulary); `vocab_size` is N + 1 (the last row embeds every other input token)."""

    model_type = "rsd_trimmed_llama"

    def __init__(self, head_token_ids: list[int] | None = None, full_vocab_size: int = 0, **kwargs) -> None:
        self.head_token_ids = list(head_token_ids or [])
        self.full_vocab_size = int(full_vocab_size)
        super().__init__(**kwargs)


class TrimmedLlamaForCausalLM(LlamaForCausalLM):
    """Maps input ids into the trimmed vocabulary, runs Llama, scatters the head's logits into the full vocabulary."""

    config_class = TrimmedLlamaConfig

    def __init__(self, config: TrimmedLlamaConfig) -> None:
        super().__init__(config)
        n, full = len(config.head_token_ids), config.full_vocab_size
        if n == 0 or n != config.vocab_size - 1 or max(config.head_token_ids) >= full:
            raise ValueError(f"trimmed draft config: {n} head_token_ids for vocab_size {config.vocab_size} "
                             f"(want vocab_size - 1) within a {full}-token vocabulary")
        self._maps: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def maps(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(head ids [N], input map [full]) on `device`; built on first use (weights load on the meta device first,
        so they cannot be buffers)."""
        if device not in self._maps:
            head = torch.tensor(self.config.head_token_ids, dtype=torch.long, device=device)
            input_map = torch.full((self.config.full_vocab_size,), len(head), dtype=torch.long, device=device)
            input_map[head] = torch.arange(len(head), device=device)
            self._maps[device] = head, input_map
        return self._maps[device]

    def to_trimmed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Target token ids -> rows of the trimmed embedding (tokens outside the head share row N)."""
        return self.maps(input_ids.device)[1][input_ids]

    def to_full(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits over the head's N tokens (+ the shared row, dropped) -> logits over the full vocabulary."""
        head = self.maps(logits.device)[0]
        full = logits.new_full((*logits.shape[:-1], self.config.full_vocab_size), float("-inf"))
        full[..., head] = logits[..., : len(head)]
        return full

    def forward(self, input_ids: torch.Tensor | None = None, **kwargs):
        out = super().forward(input_ids=None if input_ids is None else self.to_trimmed(input_ids), **kwargs)
        out.logits = self.to_full(out.logits)
        return out


AutoConfig.register(TrimmedLlamaConfig.model_type, TrimmedLlamaConfig)
AutoModelForCausalLM.register(TrimmedLlamaConfig, TrimmedLlamaForCausalLM)


def output_width(model: torch.nn.Module) -> int:
    """Rows of a causal LM's output as seen by the engine: the full vocabulary for a trimmed head."""
    full = getattr(model.config, "full_vocab_size", 0)
    return int(full) if full else int(model.get_output_embeddings().weight.shape[0])
