"""Half precision (the paper pairs run in float16): the tree forward matches the sequential forward within a stated
tolerance, and node rules never compute in half precision.

Tolerances (max |tree probs - sequential probs| over every tree node, T = 1, tiny pairs with init_std 0.3 so the
laws are peaked; eager and sdpa, seeds 0-2, measured on CPU with torch 2.13): bfloat16 2.0e-2, float16 2.3e-3
(eager attention: 0). A wrong tree mask or a position off by one moves the probabilities by >= 0.3 at this scale.
Greedy identity with AR is exact only in float32 (tests/core/test_engine.py): in half precision a k-token verify pass
rounds differently from k one-token passes, so near-ties can flip.
"""

import pytest
import torch

from helpers.trees import VOCAB, branching_tree, sequential_logits, tree_call_logits
from rsd.certify.outcomes import node_output_law
from rsd.core.engine import Engine
from rsd.core.generation import Generation
from rsd.core.rules import RULES, get_rule
from rsd.core.sampling import SamplingParams, probs_from_logits, prompt_generator
from rsd.drafters import RSDS
from rsd.models.adapter import CausalLM
from rsd.models.tiny import tiny_pair

TOLERANCE = {torch.bfloat16: 6e-2, torch.float16: 1e-2}
PARAMS = SamplingParams(1.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("arch", ["llama", "opt"])
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_half_precision_tree_forward_matches_sequential(arch, impl, dtype):
    target, _ = tiny_pair(arch, VOCAB, init_std=0.3, attn_implementation=impl)
    target = target.to(dtype)
    lm = CausalLM(target)
    assert lm.dtype == dtype
    prompt = [5, 9, 2, 7, 11]
    tree = branching_tree(prompt[-1])
    logits = tree_call_logits(lm, prompt, tree)
    assert logits.dtype == dtype
    worst = 0.0
    for v in range(len(tree)):
        ids = prompt + [tree.tokens[u] for u in tree.path_to(v)]
        tree_probs = probs_from_logits(logits[v], PARAMS)
        assert tree_probs.dtype == torch.float32  # laws leave the model in float32 whatever its dtype
        worst = max(worst, float((tree_probs - probs_from_logits(sequential_logits(target, ids), PARAMS)).abs().max()))
    assert worst <= TOLERANCE[dtype]


CASES = [("sd", "single", 1), ("specinfer", "iid", 2), ("kseq", "iid", 3), ("rsd", "without_replacement", 3),
         ("onehot", "deterministic", 3)]


@pytest.mark.parametrize("rule,scheme,m", CASES)
def test_float16_laws_give_the_float32_law(rule, scheme, m):
    """Rules run in float32 at least: a float16 q/p gives the law of the same values in float32 (to 1e-6)."""
    gen = torch.Generator().manual_seed(3)
    q16 = torch.softmax(2 * torch.randn(12, generator=gen), 0).half()
    p16 = torch.softmax(2 * torch.randn(12, generator=gen), 0).half()
    q32, p32 = q16.float(), p16.float()
    law16 = node_output_law(rule, q16, p16, m, scheme)
    law32 = node_output_law(rule, q32, p32, m, scheme)
    assert float((law16 - law32).abs().max()) <= 1e-6
    cands = torch.tensor([int(i) for i in p32.topk(m).indices])
    node16, node32 = get_rule(rule)(q16, p16, cands), get_rule(rule)(q32, p32, cands)
    assert node16.residual.dtype == torch.float32
    torch.testing.assert_close(node16.accept_probs(), node32.accept_probs(), atol=1e-6, rtol=0)
    torch.testing.assert_close(node16.residual, node32.residual, atol=1e-6, rtol=0)


def test_every_rule_is_covered():
    assert {c[0] for c in CASES} == set(RULES)


def test_float64_stays_float64():
    q = torch.softmax(torch.randn(8, dtype=torch.float64), 0)
    assert get_rule("rsd")(q, q.flip(0), torch.tensor([1, 2])).residual.dtype == torch.float64


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_engine_decodes_in_half_precision(dtype):
    """A whole RSD-S generation with half-precision models: float32 laws throughout, valid tokens."""
    target, draft = tiny_pair("llama", VOCAB, init_std=0.3)
    engine = Engine(CausalLM(target.to(dtype)), CausalLM(draft.to(dtype)), RSDS(beam_width=2, draft_length=3),
                    PARAMS, [], VOCAB)
    gen = prompt_generator(0, "half")
    committed = [5, 9, 2]
    engine.reset()
    step = engine.step(committed, gen, Generation())
    assert step.q.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in step.tree.draft_probs.values())
    out = engine.generate([5, 9, 2], 12, prompt_generator(0, "half"))
    assert len(out.new_token_ids) == 12 and all(0 <= t < VOCAB for t in out.new_token_ids)
