"""What the exact whole-engine oracle must see: a position or mask bug of the engine's tree forward, a lossy plug-in
visible only where a law gives a token zero mass (the 'sparse' tables), and the i.i.d. tries the engine builds."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

import rsd.core.engine
from rsd.certify import T1, engine_exact_check
from rsd.certify.exact_engine import ContextTables, EnumeratedDraws, TableLM, engine_law, target_law, total_variation
from rsd.certify.outcomes import enumerate_outcomes
from rsd.core.coins import RandomDraws
from rsd.core.draft_context import ModelDraftContext, tree_inputs
from rsd.core.engine import Engine
from rsd.core.generation import Generation, Stopwatch
from rsd.core.tree import DraftTree
from rsd.drafters import RSDC, SD, SpecInfer
from rsd.drafters.base import DraftContext
from rsd.verify.walk import Walk

VOCAB = 3


def one_step_error(drafter, tables: ContextTables) -> float:
    """TV(engine, target) of 2 tokens after [0], exactly (one drafted step, then at most an undrafted one); an
    oracle model refusing what a query sees counts as an infinite error."""
    make = lambda target, draft: Engine(target, draft, drafter, T1, [], VOCAB)  # noqa: E731
    try:
        return total_variation(engine_law(make, tables, [0], 2), target_law(tables, T1, [0], 2, frozenset()))
    except AssertionError:
        return math.inf


def positions_one_too_far(tree: DraftTree, committed: list[int], cached: int):
    """tree_inputs with every tree node one position too far (its ancestors still in order: the same tokens seen)."""
    tokens, positions, attend = tree_inputs(tree, committed, cached)
    positions = positions.clone()
    positions[len(committed) - cached:] += 1
    return tokens, positions, attend


def nodes_miss_the_root(tree: DraftTree, committed: list[int], cached: int):
    """tree_inputs whose tree nodes do not attend to the root (the last committed token)."""
    tokens, positions, attend = tree_inputs(tree, committed, cached)
    attend = attend.clone()
    attend[len(committed) - cached:, len(committed) - 1] = False
    return tokens, positions, attend


@pytest.mark.parametrize("bug, make", [(positions_one_too_far, lambda: SD(1)),
                                       (positions_one_too_far, lambda: RSDC([2])),
                                       (nodes_miss_the_root, lambda: RSDC([2]))],  # a chain runs without a mask
                         ids=["positions-sd", "positions-rsd_c", "mask-rsd_c"])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_oracle_catches_a_position_or_mask_bug_in_the_tree_forward(monkeypatch, bug, make, seed):
    """A real model reads positions (RoPE, learned embeddings) and the mask, so either bug changes its output; the
    oracle must refuse both, though here a shifted node is never seen again (the step's accepted node ends the
    text, a rejected one is dropped), so the tokens each query sees, in order, are the right ones."""
    torch.set_num_threads(1)
    tables = ContextTables(VOCAB, seed, "close")
    assert one_step_error(make(), tables) < 1e-12
    monkeypatch.setattr(rsd.core.engine, "tree_inputs", bug)
    assert one_step_error(make(), tables) > 1e-12


class FlooredTargetWalk(Walk):
    """The walk on a target law floored at 1e-3 ('no division by zero'): lossy only where the target has a zero."""

    def verify(self, tree, q, coins, eos, rule):
        floored = q.clamp_min(1e-3)
        return super().verify(tree, floored / floored.sum(-1, keepdim=True), coins, eos, rule)


class FlooredSD(SD):
    verifier = f"{__name__}.FlooredTargetWalk"


class PaddedRSDC(RSDC):
    """Keeps b children per node: pads Gumbel-top-b with the likeliest undrawn tokens when fewer than b have mass."""

    def build(self, tree: DraftTree, ctx: DraftContext) -> None:
        frontier = [0]
        for b in self.branching[: ctx.max_depth]:
            probs = ctx.probs(tree, frontier)
            drawn = ctx.draws.without_replacement(probs, b)
            rows = [ts + [t for t in p.argsort(descending=True).tolist() if t not in ts][: b - len(ts)]
                    for p, ts in zip(probs, drawn)]
            frontier = [tree.add_candidate(v, t) for v, ts in zip(frontier, rows) for t in ts]


@pytest.mark.parametrize("make", [lambda: FlooredSD(2), lambda: PaddedRSDC([3])], ids=["target_floor", "draft_pad"])
def test_the_oracle_fails_a_plugin_lossy_only_at_zero_mass_tokens(make):
    """With every law positive both plug-ins are exact; the oracle's sparse tables (a zero in the target's law and
    one in the draft's) must expose them: a token the target never emits, a candidate the drafter gave no mass."""
    torch.set_num_threads(1)
    check = engine_exact_check(make())
    assert check.passed is False, check.summary
    dense = [case for case in check.details.get("cases", []) if case["kind"] != "sparse"]
    assert all(case["tv"] < 1e-12 for case in dense)  # what the close tables see: nothing


def trie_key(tree: DraftTree) -> tuple:
    return tuple(tree.tokens), tuple(tree.parents), tuple((v, tuple(c)) for v, c in sorted(tree.candidates.items()))


def build_trie(drafter: SpecInfer, draws, tables: ContextTables) -> DraftTree:
    tree = DraftTree.with_root(0)
    ctx = ModelDraftContext(TableLM(tables, 1), [0], T1, VOCAB, draws, Generation(), Stopwatch(torch.device("cpu")))
    drafter.build(tree, ctx)
    return tree


def test_the_oracle_enumerates_the_tries_the_engine_builds():
    """SpecInfer K = 3, L = 2: the oracle's draws (no batched i.i.d. rows) enumerate tries of 3 sequences per level,
    with total probability 1, and every trie the engine's draws build is one of them."""
    torch.set_num_threads(1)
    drafter, tables = SpecInfer(3, 2), ContextTables(VOCAB, 0, "close")
    law: dict[tuple, float] = {}
    for key, w in enumerate_outcomes(lambda coins: trie_key(build_trie(drafter, EnumeratedDraws(coins), tables))):
        law[key] = law.get(key, 0.0) + w
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    for tokens, parents, candidates in law:
        depth = {0: 0}
        for v in range(1, len(tokens)):
            depth[v] = depth[parents[v]] + 1
        per_level = Counter(depth[v] for v, c in candidates for _ in c)
        assert per_level == {0: 3, 1: 3}, (tokens, parents, candidates)
    gen = torch.Generator().manual_seed(0)
    built = Counter(trie_key(build_trie(drafter, RandomDraws(gen), tables)) for _ in range(300))
    assert set(built) <= set(law) and len(built) > 20
