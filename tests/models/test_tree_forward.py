"""A tree forward (one call, tree mask, explicit positions) equals sequential root-to-node forwards
(docs/algorithms.md#tree-attention), and compacting the cache to the accepted path leaves it equal to a fresh
sequential run (docs/algorithms.md#pitfalls, 6)."""

import pytest
import torch

from helpers.trees import VOCAB, branching_tree, sequential_logits, tree_call_logits
from rsd.core.coins import RandomDraws
from rsd.core.draft_context import ModelDraftContext, tree_inputs
from rsd.core.generation import Generation, Stopwatch
from rsd.core.sampling import SamplingParams
from rsd.core.tree import DraftTree
from rsd.models.adapter import CausalLM
from rsd.models.tiny import tiny_pair


@pytest.mark.parametrize("arch", ["llama", "opt"])
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_tree_logits_equal_sequential(arch, impl):
    target, _ = tiny_pair(arch, VOCAB, attn_implementation=impl)
    prompt = [5, 9, 2, 7, 11]
    tree = branching_tree(prompt[-1])
    logits = tree_call_logits(CausalLM(target), prompt, tree)
    for v in range(len(tree)):
        ids = prompt + [tree.tokens[u] for u in tree.path_to(v)]
        torch.testing.assert_close(logits[v], sequential_logits(target, ids), atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ["llama", "opt"])
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_compaction_then_next_step_equals_fresh_run(arch, impl):
    target, _ = tiny_pair(arch, VOCAB, attn_implementation=impl)
    lm = CausalLM(target)
    prompt = [5, 9, 2, 7, 11]
    tree = branching_tree(prompt[-1])
    lm.reset()
    tokens, positions, attend = tree_inputs(tree, prompt, 0)
    lm.forward(tokens, positions, attend)
    leaf = max(range(len(tree)), key=lambda v: (tree.depths[v], v))  # a deep path through later branches
    path = tree.path_to(leaf)[:2]
    root = len(prompt) - 1
    lm.compact(root + 1, root + torch.tensor(path))
    committed = prompt + [tree.tokens[v] for v in path] + [33]
    assert lm.cached_len == len(committed) - 1
    next_tree = branching_tree(committed[-1])
    tokens, positions, attend = tree_inputs(next_tree, committed, lm.cached_len)
    logits = lm.forward(tokens, positions, attend)
    for v in range(len(next_tree)):
        ids = committed + [next_tree.tokens[u] for u in next_tree.path_to(v)]
        torch.testing.assert_close(logits[v], sequential_logits(target, ids), atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ["llama", "opt"])
def test_draft_levels_equal_sequential(arch):
    """DraftContext expands level by level with the tree mask; each node's p equals the sequential draft law."""
    _, draft = tiny_pair(arch, VOCAB)
    prompt = [5, 9, 2, 7, 11]
    tree = DraftTree.with_root(prompt[-1])
    lm = CausalLM(draft)
    lm.reset()
    params = SamplingParams(0.7, top_k=20)
    ctx = ModelDraftContext(lm, prompt, params, VOCAB, RandomDraws(torch.Generator().manual_seed(0)), Generation(),
                       Stopwatch(torch.device("cpu")))
    level = [0]
    for b in (3, 2, 2):
        probs = ctx.probs(tree, level)
        level = [tree.add_candidate(v, int(t)) for v, p in zip(level, probs) for t in p.topk(b).indices]
    from rsd.core.sampling import probs_from_logits

    for v, p in tree.draft_probs.items():
        ids = prompt + [tree.tokens[u] for u in tree.path_to(v)]
        torch.testing.assert_close(p, probs_from_logits(sequential_logits(draft, ids), params), atol=1e-5, rtol=0)


def test_bool_mask_would_be_wrong_under_eager():
    """Why the adapter converts to an additive float mask: eager attention ignores a boolean tree mask
    (docs/algorithms.md#pitfalls, 5)."""
    target, _ = tiny_pair("llama", VOCAB, attn_implementation="eager")
    prompt = [5, 9, 2, 7, 11]
    tree = branching_tree(prompt[-1])
    tokens, positions, attend = tree_inputs(tree, prompt, 0)
    with torch.inference_mode():
        wrong = target(input_ids=tokens[None], position_ids=positions[None], attention_mask=attend[None, None]).logits
    lm = CausalLM(target)
    lm.reset()
    right = lm.forward(tokens, positions, attend)
    assert not torch.allclose(wrong[0], right, atol=1e-4)
