"""Greedy identity: at temperature 0 the drafter's output equals AR's token for token, on tiny Llama and OPT pairs
(and the embedded pair on request)."""

from __future__ import annotations

import torch

from rsd.certify.report import Check
from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.data import load_builtin
from rsd.drafters import AR
from rsd.drafters.base import Drafter
from rsd.harness.schema import ModelPairConfig
from rsd.models.adapter import CausalLM
from rsd.models.embedded import default_pair_config
from rsd.models.pairs import load_pair
from rsd.models.tiny import tiny_pair


def greedy_pairs(embedded: bool) -> list[tuple[str, torch.nn.Module, torch.nn.Module, list[list[int]], list[int]]]:
    """(name, target, draft, prompts, eos) for greedy identity: tiny pairs with an independent and a copied draft."""
    pairs = []
    for arch in ("llama", "opt"):
        target, draft = tiny_pair(arch, 64, seed=3)
        prompts = [[5, 9, 2], [17, 3, 40, 41, 8], [60]]
        pairs.append((f"tiny {arch}", target, draft, prompts, []))
        pairs.append((f"tiny {arch}, draft = target", target, target, prompts, []))
    if embedded:
        pair = load_pair(ModelPairConfig.from_dict({**default_pair_config(), "dtype": "float32"}))
        prompts = [pair.encode_prompt(load_builtin(n)[0].prompt) for n in ("dolly_builtin", "xsum_builtin")]
        pairs.append(("embedded smollm2", pair.target.model, pair.draft.model, prompts, pair.eos_token_ids))
    return pairs


def greedy_check(drafter: Drafter, embedded: bool, max_new_tokens: int = 24) -> Check:
    """At temperature 0 the drafter's output equals AR's token for token."""
    greedy = SamplingParams(0.0)
    total, equal, mismatches = 0, 0, []
    for name, target, draft, prompts, eos in greedy_pairs(embedded):
        vocab = min(target.get_output_embeddings().weight.shape[0], draft.get_output_embeddings().weight.shape[0])
        ar = Engine(CausalLM(target), None, AR(), greedy, eos, vocab)
        spec = Engine(CausalLM(target), CausalLM(draft), drafter, greedy, eos, vocab)
        for i, prompt in enumerate(prompts):
            a = ar.generate(prompt, max_new_tokens, prompt_generator(0, str(i))).new_token_ids
            b = spec.generate(prompt, max_new_tokens, prompt_generator(0, str(i))).new_token_ids
            total += 1
            equal += a == b
            if a != b:
                mismatches.append(name)
    return Check("greedy identity", equal == total,
                 f"{equal}/{total} sequences equal to AR token for token ({max_new_tokens} tokens each)"
                 + (f"; mismatches on {sorted(set(mismatches))}" if mismatches else ""),
                 {"equal": equal, "total": total})
