"""Tiny random-weight Llama and OPT pairs built from configs (no files): fast tests and the Monte Carlo oracle."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import LlamaConfig, LlamaForCausalLM, OPTConfig, OPTForCausalLM, PreTrainedModel

from rsd.registry import TINY_MODELS, lookup

CONTEXT_LENGTH = 2048  # max_position_embeddings of every tiny model


class ByteTokenizer:
    """UTF-8 bytes as tokens 0..255 plus BOS 256 and EOS 257: a tokenizer for the file-less tiny pairs."""

    bos_token_id, eos_token_id = 256, 257

    def __len__(self) -> int:
        return 258

    def encode(self, text: str) -> list[int]:
        return [self.bos_token_id] + list(text.encode("utf-8"))

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


def llama(vocab_size: int, hidden_size: int, num_layers: int, init_std: float
          ) -> tuple[LlamaConfig, type[LlamaForCausalLM]]:
    """`tiny:llama`'s config and model class."""
    from transformers import LlamaConfig, LlamaForCausalLM  # here, not at the top: model classes import slowly

    return LlamaConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers,
                       num_attention_heads=2, max_position_embeddings=CONTEXT_LENGTH,
                       intermediate_size=2 * hidden_size, num_key_value_heads=1, tie_word_embeddings=False,
                       initializer_range=init_std, bos_token_id=0, eos_token_id=1, pad_token_id=1), LlamaForCausalLM


def opt(vocab_size: int, hidden_size: int, num_layers: int, init_std: float
        ) -> tuple[OPTConfig, type[OPTForCausalLM]]:
    """`tiny:opt`'s config and model class."""
    from transformers import OPTConfig, OPTForCausalLM

    return OPTConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers,
                     num_attention_heads=2, max_position_embeddings=CONTEXT_LENGTH, ffn_dim=2 * hidden_size,
                     word_embed_proj_dim=hidden_size, init_std=init_std, bos_token_id=0, eos_token_id=1,
                     pad_token_id=1, enable_bias=True), OPTForCausalLM


def tiny_model(arch: str, vocab_size: int, hidden_size: int, num_layers: int, seed: int,
               init_std: float = 0.02, attn_implementation: str = "sdpa") -> PreTrainedModel:
    """A deterministic random-weight causal LM of `tiny:ARCH` (rsd.registry.TINY_MODELS); a large `init_std` makes
    its next-token laws peaked."""
    config, cls = lookup(TINY_MODELS, f"tiny:{arch}")(vocab_size, hidden_size, num_layers, init_std)
    config._attn_implementation = attn_implementation
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)  # the weights must not depend on the caller's default dtype
    try:
        torch.manual_seed(seed)
        return cls(config).eval()
    finally:
        torch.set_default_dtype(default_dtype)


def tiny_pair(arch: str, vocab_size: int = 64, seed: int = 0, init_std: float = 0.02,
              attn_implementation: str = "sdpa") -> tuple[PreTrainedModel, PreTrainedModel]:
    """(target, draft): a 2-layer width-64 target and a 1-layer width-32 draft with the same vocabulary."""
    target = tiny_model(arch, vocab_size, 64, 2, seed, init_std, attn_implementation)
    draft = tiny_model(arch, vocab_size, 32, 1, seed + 1, init_std, attn_implementation)
    return target, draft
