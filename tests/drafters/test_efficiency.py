"""Efficiency oracles: bugs that keep every method lossless but lower its acceptance or inflate its tree.

Output-law oracles cannot see these (issue 13): a draft KV cache compacted by length instead of by the accepted
path (docs/algorithms.md#pitfalls) still verifies against the laws it sampled from, and an i.i.d. trie without prefix
sharing (§3) still verifies exactly. So these tests check the engine's own state after every `Engine.step`: both
KV caches equal a fresh forward over the committed tokens, every recorded draft law equals a fresh sequential
draft forward, a draft equal to the target accepts the whole tree depth every step, and the i.i.d. trie has one
node per distinct drawn prefix.
"""

from functools import cache

import pytest
import torch

from rsd.core.engine import Engine
from rsd.core.generation import Generation, Step
from rsd.core.sampling import SamplingParams, probs_from_logits, prompt_generator
from rsd.drafters import AR, RSDC, RSDS, SD, SpecInfer, SpecTr
from rsd.models.adapter import CausalLM
from rsd.models.tiny import tiny_pair

VOCAB = 64
PROMPT = [5, 9, 2, 7, 11]
L = 4
T1 = SamplingParams(1.0)
TREE_DRAFTERS = {
    "sd": lambda: SD(L),
    "specinfer": lambda: SpecInfer(3, L),
    "spectr": lambda: SpecTr(3, L),
    "rsd_c": lambda: RSDC([3, 2, 1, 1]),
    "rsd_s": lambda: RSDS(3, L),
}
DRAFTERS = {"ar": AR, **TREE_DRAFTERS}


def snapshot(lm: CausalLM | None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Keys and values [heads, seq, dim] of every cache layer (copies: the engine replaces them later)."""
    if lm is None or lm.cache is None:
        return []
    return [(layer.keys[0].clone(), layer.values[0].clone()) for layer in lm.cache.layers]


def decode_steps(engine: Engine, steps: int, seed: str) -> tuple[list[tuple[list[int], Step, list, list]], Generation]:
    """`steps` calls of Engine.step after PROMPT, as Engine.generate makes them: per step, the committed tokens it
    started from, the Step, and snapshots of the target's and the draft's caches right after it."""
    engine.reset()
    committed, out, gen, trace = list(PROMPT), Generation(), prompt_generator(0, seed), []
    for _ in range(steps):
        before = list(committed)
        step = engine.step(committed, gen, out)
        committed.extend(step.emitted)
        trace.append((before, step, snapshot(engine.target), snapshot(engine.draft)))
    return trace, out


@cache
def models(arch: str, init_std: float) -> tuple[torch.nn.Module, torch.nn.Module]:
    return tiny_pair(arch, VOCAB, seed=4, init_std=init_std)


@cache
def traced(arch: str, name: str, params: SamplingParams = T1) -> tuple[torch.nn.Module, torch.nn.Module, list]:
    """Six steps with mildly peaked laws: trees branch and the independent draft is accepted often enough that
    accepted paths leave the first-drafted nodes (where compactions by length and by path differ)."""
    target, draft = models(arch, 0.1)
    drafter = DRAFTERS[name]()
    engine = Engine(CausalLM(target), CausalLM(draft) if drafter.draft_length else None, drafter, params, [], VOCAB)
    trace, _ = decode_steps(engine, 6, f"{arch}-{name}")
    return target, draft, trace


@torch.inference_mode()
def fresh_cache(model: torch.nn.Module, ids: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    cache_ = model(input_ids=torch.tensor([ids]), use_cache=True).past_key_values
    return [(layer.keys[0], layer.values[0]) for layer in cache_.layers]


def assert_close(got: torch.Tensor, want: torch.Tensor, where: str) -> None:
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0, msg=lambda m: f"{where}: {m}")


def assert_cache_equals_fresh(cached: list, model: torch.nn.Module, ids: list[int], what: str) -> None:
    n = cached[0][0].shape[1]
    assert n <= len(ids), f"{what}: the cache holds {n} entries but only {len(ids)} tokens are committed"
    for layer, ((k, v), (k0, v0)) in enumerate(zip(cached, fresh_cache(model, ids[:n]))):
        assert_close(k, k0, f"{what}, layer {layer} keys")
        assert_close(v, v0, f"{what}, layer {layer} values")


@pytest.mark.parametrize("arch", ["llama", "opt"])
@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_caches_after_each_step_equal_a_fresh_forward(arch, name):
    """After every Engine.step the target cache holds exactly the committed prefix plus the accepted path (all but
    the last emitted token) and the draft cache a prefix of it, each equal to a plain forward over those tokens."""
    target, draft, trace = traced(arch, name)
    power = 0
    for i, (before, step, target_kv, draft_kv) in enumerate(trace):
        committed = before + step.emitted
        assert target_kv[0][0].shape[1] == len(committed) - 1
        assert_cache_equals_fresh(target_kv, target, committed, f"step {i} target")
        if name != "ar":
            assert_cache_equals_fresh(draft_kv, draft, committed, f"step {i} draft")
        power += len(step.path) >= 2 or any(step.tree.candidates[step.tree.parents[v]][0] != v for v in step.path)
    if name not in ("ar", "sd"):  # the test has power: some accepted path is not the chain of first-drafted nodes
        assert power > 0


@pytest.mark.parametrize("arch, params", [("llama", T1), ("opt", T1),
                                          ("llama", SamplingParams(0.7, top_k=20, top_p=0.9))], ids=str)
@pytest.mark.parametrize("name", sorted(TREE_DRAFTERS))
def test_recorded_draft_laws_equal_a_fresh_sequential_draft_forward(arch, params, name):
    """tree.draft_probs[v] at every node of every step equals the draft's law after committed + v's ancestors from
    a plain forward with no cache and no tree mask (so each step starts from a correctly compacted draft cache),
    processed with the run's sampling settings (a law recorded untempered or unfiltered shows at T != 1)."""
    _, draft, trace = traced(arch, name, params)
    checked = 0
    for i, (before, step, _, _) in enumerate(trace):
        tree = step.tree
        by_depth: dict[int, list[int]] = {}
        for v in tree.draft_probs:
            by_depth.setdefault(tree.depths[v], []).append(v)
        for nodes in by_depth.values():  # equal depth, equal length: one batched forward
            ids = torch.tensor([before + [tree.tokens[u] for u in tree.path_to(v)] for v in nodes])
            with torch.inference_mode():
                want = probs_from_logits(draft(input_ids=ids).logits[:, -1, :VOCAB], params)
            got = torch.stack([tree.draft_probs[v] for v in nodes])
            assert_close(got, want, f"step {i}, nodes {nodes}")
            checked += len(nodes)
    assert checked >= len(trace) * L


@pytest.mark.parametrize("arch", ["llama", "opt"])
@pytest.mark.parametrize("name", sorted(TREE_DRAFTERS))
def test_draft_equal_to_target_accepts_the_full_depth_every_step(arch, name):
    """With draft == target every node rule accepts its first candidate with probability 1 (up to float noise), and
    the first candidates always form a full-depth path, so every step emits L + 1 tokens. A peaked model makes a
    draft law computed from a wrong cache differ from the target's, so a mis-compacted draft cache shows here."""
    target, _ = models(arch, 0.5)
    engine = Engine(CausalLM(target), CausalLM(target), TREE_DRAFTERS[name](), SamplingParams(1.0), [], VOCAB)
    steps = 6
    out = engine.generate(PROMPT, steps * (L + 1), prompt_generator(1, f"{arch}-{name}"))
    assert out.accepted_lengths == [L] * steps
    assert out.target_calls == steps and out.draft_calls == steps * L


@pytest.mark.parametrize("drafter", [SpecInfer, SpecTr])
def test_iid_trie_is_a_chain_when_greedy(drafter):
    """At temperature 0 the K sequences are identical, so the trie shares every prefix: a chain of L nodes."""
    target, draft = models("llama", 0.3)
    engine = Engine(CausalLM(target), CausalLM(draft), drafter(3, L), SamplingParams(0.0), [], VOCAB)
    trace, out = decode_steps(engine, 6, "greedy")
    assert out.tokens_verified == [L] * len(trace)
    for _, step, _, _ in trace:
        assert len(step.tree) - 1 == step.tree.depth == L
        assert step.tree.candidates[0] == [1, 1, 1]


@pytest.mark.parametrize("drafter", [SpecInfer, SpecTr])
def test_iid_trie_has_one_node_per_distinct_drawn_prefix(drafter):
    """At temperature 1: each node's candidates are the next tokens of the sequences through it (K at the root, one
    per sequence reaching the node below it), and no two nodes spell the same token prefix."""
    k = 4
    target, draft = models("llama", 0.5)
    engine = Engine(CausalLM(target), CausalLM(draft), drafter(k, L), SamplingParams(1.0), [], VOCAB)
    trace, out = decode_steps(engine, 8, "sampled")
    shared = 0
    for i, (_, step, _, _) in enumerate(trace):
        tree = step.tree
        assert len(tree.candidates[0]) == k
        for c in range(1, len(tree)):
            through = tree.candidates[tree.parents[c]].count(c)
            assert through >= 1
            if tree.depths[c] < L:
                assert len(tree.candidates[c]) == through
        prefixes = {tuple(tree.tokens[u] for u in tree.path_to(v)) for v in range(1, len(tree))}
        assert len(tree) - 1 == len(prefixes), f"step {i}: {len(tree) - 1} nodes for {len(prefixes)} prefixes"
        assert out.tokens_verified[i] == len(tree) - 1
        shared += k * L - len(prefixes)
    assert shared > 0  # the test has power: some drawn sequences did share a prefix
