"""EAGLE-2's dynamic tree: the kept tree is the N best nodes of the expansion the method defines (checked against a
brute-force reference), the draft context renumbers its state when nodes are dropped, and ties and shapes behave."""

import math

import pytest
import torch

from rsd.core.budgets import Budget
from rsd.core.engine import Engine
from rsd.core.generation import Generation
from rsd.core.sampling import SamplingParams, most_likely, prompt_generator
from rsd.core.tree import DraftTree
from rsd.drafters import AR, Eagle2
from rsd.models.adapter import CausalLM
from rsd.models.tiny import tiny_pair

T1 = SamplingParams(1.0)


def path_law(path: tuple[int, ...], vocab: int = 6) -> torch.Tensor:
    """A fixed, path-dependent draft law with distinct probabilities (so the reference's order is unambiguous)."""
    g = torch.Generator().manual_seed(hash(path) % (1 << 31))
    return torch.softmax(3 * torch.randn(vocab, generator=g, dtype=torch.float64), -1).float()


class PathContext:
    """A DraftContext whose law at a node depends only on the node's token path (no model, no cache)."""

    def __init__(self, max_depth: int = 1 << 30) -> None:
        self.max_depth, self.vocab_size, self.committed, self.draws = max_depth, 6, [0], None
        self.calls = 0

    def probs(self, tree: DraftTree, nodes: list[int]) -> torch.Tensor:
        self.calls += 1
        out = torch.stack([path_law(tuple(tree.tokens[v] for v in tree.path_to(n))) for n in nodes])
        for v, p in zip(nodes, out):
            tree.draft_probs[v] = p
        return out

    def prune(self, tree: DraftTree, keep: list[int]) -> list[int]:
        return tree.keep(keep)


def reference_tree(k: int, depth: int, n: int) -> set[tuple[int, ...]]:
    """EAGLE-2 written out over token paths: level by level, the top-k children of the k best paths of the level
    before (by sum of log-probabilities), then the n best paths of all levels."""
    scored: dict[tuple[int, ...], float] = {}
    frontier = [()]
    for _ in range(depth):
        layer = []
        for path in frontier:
            law = path_law(path)
            for t in sorted(range(6), key=lambda t: -float(law[t]))[:k]:
                child = path + (t,)
                scored[child] = scored.get(path, 0.0) + math.log(float(law[t]))
                layer.append(child)
        frontier = sorted(layer, key=lambda c: -scored[c])[:k]
    return set(sorted(scored, key=lambda c: -scored[c])[:n])


@pytest.mark.parametrize("k, depth, n", [(2, 3, 5), (3, 3, 9), (3, 2, 12), (1, 4, 4), (4, 3, 7)])
def test_the_kept_tree_is_the_n_best_of_the_expansion(k, depth, n):
    tree, ctx = DraftTree.with_root(0), PathContext()
    Eagle2(k, depth, n).build(tree, ctx)
    kept = {tuple(tree.tokens[v] for v in tree.path_to(c)) for c in range(1, len(tree))}
    assert kept == reference_tree(k, depth, n)
    assert len(tree) - 1 == n and ctx.calls == depth
    for v, cands in tree.candidates.items():  # each candidate list is the most likely tokens of v's law, in order
        assert [tree.tokens[c] for c in cands] == most_likely(tree.draft_probs[v][None], len(cands))[0][0]


def test_it_drafts_no_deeper_than_allowed_and_never_a_zero_mass_token():
    tree, ctx = DraftTree.with_root(0), PathContext(max_depth=2)
    Eagle2(3, 4, 12).build(tree, ctx)
    assert tree.depth == 2 and ctx.calls == 2
    onehot, ctx = DraftTree.with_root(0), PathContext()
    ctx.probs = lambda t, nodes: torch.nn.functional.one_hot(torch.tensor([1] * len(nodes)), 6).float()
    Eagle2(3, 3, 6).build(onehot, ctx)
    assert onehot.tokens == [0, 1, 1, 1]  # a one-hot law has one candidate: the greedy chain


def test_keep_renumbers_the_tree_and_refuses_an_orphan():
    tree = DraftTree.with_root(9)
    a, b = tree.add_candidate(0, 1), tree.add_candidate(0, 2)
    c, d = tree.add_candidate(a, 3), tree.add_candidate(b, 4)
    for v in range(5):
        tree.draft_probs[v] = torch.full((2,), float(v))
    new = tree.keep([a, b, d])
    assert new == [0, 1, 2, -1, 3] and tree.tokens == [9, 1, 2, 4] and tree.parents == [-1, 0, 0, 2]
    assert tree.depths == [0, 1, 1, 2] and tree.candidates == {0: [1, 2], 2: [3]}
    assert sorted(tree.draft_probs) == [0, 1, 2, 3] and float(tree.draft_probs[3][0]) == 4.0
    assert c not in tree.candidates
    with pytest.raises(ValueError, match="node 2 is kept but its parent 1 is not"):
        DraftTree(tokens=[0, 1, 2], parents=[-1, 0, 1], depths=[0, 1, 2]).keep([2])


def test_the_draft_cache_serves_the_kept_nodes_after_pruning():
    """Over several steps (each pruning expanded nodes, then compacting the cache to the accepted path), every node's
    law in the engine equals the draft model's law recomputed from scratch on the committed tokens plus its path:
    a slot left unrenumbered by the pruning would feed a later step a dropped node's cache entry."""
    target, _ = tiny_pair("llama", 64, seed=3, init_std=0.2)
    draft = target  # at T = 0.3 a draft equal to the target accepts deep paths through renumbered nodes
    engine = Engine(CausalLM(target), CausalLM(draft), Eagle2(3, 4, 8, None), SamplingParams(0.3), [], 64)
    committed, accepted = [5, 6, 7, 8], 0
    engine.reset()
    engine._prefill(committed, Generation())
    gen = prompt_generator(0, "prune")
    for _ in range(6):
        step = engine.step(committed, gen, Generation())
        assert len(step.tree) == 9
        with torch.no_grad():
            for v, law in step.tree.draft_probs.items():
                ids = torch.tensor(committed + [step.tree.tokens[u] for u in step.tree.path_to(v)])
                fresh = torch.softmax(draft(input_ids=ids[None]).logits[0, -1].float() / 0.3, -1)
                torch.testing.assert_close(law, fresh, atol=1e-5, rtol=1e-4)
        committed += step.emitted
        accepted += len(step.path)
    assert accepted > 0, "no step accepted a drafted token: pick a seed that does"


def test_most_likely_breaks_ties_to_the_lower_id():
    g = torch.Generator().manual_seed(0)
    for _ in range(500):
        counts = torch.randint(0, 4, (7,), generator=g).float()
        if counts.sum() == 0:
            continue
        p, m = counts / counts.sum(), int(torch.randint(1, 8, (), generator=g))
        want = [i for _, i in sorted((-float(p[i]), i) for i in range(7) if p[i] > 0)[:m]]
        assert most_likely(p[None], m)[0][0] == want


def test_shapes_and_infeasible_trees():
    assert Eagle2.shapes(Budget("fixed_length", draft_length=4), {"top_k": 3}) == [
        {"top_k": 3, "draft_length": 4, "tree_size": 12, "draft_temperature": 1.0}]
    assert Eagle2.shapes(Budget("fixed_compute", target_tokens=6), {"top_k": 3, "draft_temperature": None}) == [
        {"top_k": k, "draft_length": d, "tree_size": 6, "draft_temperature": None}
        for k, d in ((1, 6), (2, 3), (3, 2), (6, 1))]
    with pytest.raises(ValueError, match="looks at 3 nodes, fewer than N=4"):
        Eagle2(1, 3, 4)
    assert Eagle2(2, 3, 5).describe() == {"draft_length": 3, "max_tree_size": 5, "top_k": 2, "draft_temperature": 1.0}
    with pytest.raises(ValueError, match="draft_temperature >= 0"):
        Eagle2(2, 3, 5, draft_temperature=-1.0)


def test_generation_runs_and_counts_calls():
    target, draft = tiny_pair("llama", 64, seed=3, init_std=0.2)
    out = Engine(CausalLM(target), CausalLM(draft), Eagle2(3, 3, 9), T1, [], 64).generate(
        [1, 2, 3], 20, prompt_generator(0, "e2"))
    assert len(out.new_token_ids) == 20 and max(out.tokens_verified) <= 9
    assert out.draft_calls <= 3 * out.target_calls


def test_a_greedy_target_still_gets_a_wide_tree_from_the_drafts_own_softmax():
    """At T = 0 the draft's laws stay at its own temperature (1.0): the tree is k wide, not a greedy chain, and the
    output is still the target's greedy text; with draft_temperature null the tree is the one-hot chain."""
    target, draft = tiny_pair("llama", 64, seed=3, init_std=0.2)
    greedy = SamplingParams(0.0)
    want = Engine(CausalLM(target), None, AR(), greedy, [], 64).generate([1, 2, 3], 16, prompt_generator(0, "g"))
    for temperature, widest in ((1.0, 3), (None, 1)):
        engine = Engine(CausalLM(target), CausalLM(draft), Eagle2(3, 3, 9, temperature), greedy, [], 64)
        widths = root_widths(engine)
        out = engine.generate([1, 2, 3], 16, prompt_generator(0, "g"))
        assert out.new_token_ids == want.new_token_ids and max(widths) == widest


def root_widths(engine: Engine) -> list[int]:
    """The number of root candidates of every step the engine takes from now on."""
    widths, step = [], engine.step

    def recorded(*args, **kwargs):
        out = step(*args, **kwargs)
        widths.append(len(out.tree.candidates.get(0, [])))
        return out

    engine.step = recorded
    return widths
