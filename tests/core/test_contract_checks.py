"""The engine's run-time contract checks refuse a lossy plug-in: an inflated expected yield, tokens emitted after an
accepted EOS, a drafted token its drafter gave zero mass (on the engine's own coins and on coins handed in)."""

from __future__ import annotations

import pytest
import torch

from rsd.certify.exact_engine import ContextTables, TableLM
from rsd.core.coins import RandomCoins, RandomDraws
from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams
from rsd.core.tree import DraftTree
from rsd.drafters import SD
from rsd.drafters.base import DraftContext
from rsd.drafters.contract import DrafterContractError
from rsd.verify.contract import VerifierContractError
from rsd.verify.walk import Walk

VOCAB, EOS = 3, 2
T1 = SamplingParams(1.0)


class InflatedYield(Walk):
    """States one token more than a whole accepted path plus its bonus token: more than depth + 1."""

    def expected_yield(self, tree, q, eos, rule):
        return float(tree.depth) + 2.0


class TokenAfterEOS(Walk):
    """The walk, but a step whose accepted path ends in an EOS still emits a token after it."""

    def verify(self, tree, q, coins, eos, rule):
        path, emitted = super().verify(tree, q, coins, eos, rule)
        if path and tree.tokens[path[-1]] in eos and len(emitted) == len(path):
            emitted = [*emitted, 0]
        return path, emitted


def sd_verified_by(name: str, length: int = 2) -> SD:
    """SD whose tree is verified by the plug-in verifier `name` of this module."""

    class SDWith(SD):
        verifier = f"{__name__}.{name}"

    return SDWith(length)


class LeastLikelySD(SD):
    """A lossy plug-in: drafts each level's least likely token (zero mass where the draft law has a zero)."""

    name = "least_likely"

    def build(self, tree: DraftTree, ctx: DraftContext) -> None:
        v = 0
        for _ in range(min(self.length, ctx.max_depth)):
            v = tree.add_candidate(v, int(ctx.probs(tree, [v])[0].argmin()))


def table_engine(drafter: SD, kind: str = "close", eos: list[int] | None = None, seed: int = 0) -> Engine:
    tables = ContextTables(VOCAB, seed, kind)
    return Engine(TableLM(tables, 0), TableLM(tables, 1), drafter, T1, eos or [], VOCAB)


def test_an_expected_yield_above_depth_plus_one_is_refused() -> None:
    """A verifier stating more tokens per step than a whole path emits would inflate expected block efficiency."""
    engine = table_engine(sd_verified_by("InflatedYield"))
    with pytest.raises(VerifierContractError, match=r"expected_yield returned 4\.0 on a tree of depth 2"):
        engine.generate([0], 6, torch.Generator().manual_seed(0))


def test_a_token_after_an_accepted_eos_is_refused() -> None:
    """The honest walk stops at an accepted EOS; a verifier emitting a token after it breaks the contract."""
    honest = table_engine(SD(2), eos=[EOS])
    for seed in range(40):
        out = honest.generate([0], 8, torch.Generator().manual_seed(seed))
        assert EOS not in out.new_token_ids[:-1]
    engine = table_engine(sd_verified_by("TokenAfterEOS"), eos=[EOS])
    with pytest.raises(VerifierContractError, match="none after an accepted EOS"):
        for seed in range(40):  # the first seeds whose steps accept a drafted EOS
            engine.generate([0], 8, torch.Generator().manual_seed(seed))


def test_a_zero_mass_drafted_token_is_refused_on_the_engines_coins() -> None:
    """A normal run (the check's flag read with the verifier's first coin) refuses a token of zero draft mass."""
    assert len(table_engine(SD(2), "sparse").generate([0], 6, torch.Generator().manual_seed(0)).new_token_ids) == 6
    engine = table_engine(LeastLikelySD(2), "sparse")
    with pytest.raises(DrafterContractError, match="drafter 'least_likely' drafted a token with zero mass"):
        engine.generate([0], 6, torch.Generator().manual_seed(0))


def test_a_zero_mass_drafted_token_is_refused_on_given_coins() -> None:
    """With coins and draws handed in (the exact oracle's way) the check runs on its own and still refuses it."""
    gen = torch.Generator().manual_seed(0)
    honest = table_engine(SD(2), "sparse").generate([0], 6, None, coins=RandomCoins(gen), draws=RandomDraws(gen))
    assert len(honest.new_token_ids) == 6
    engine = table_engine(LeastLikelySD(2), "sparse")
    with pytest.raises(DrafterContractError, match="drafter 'least_likely' drafted a token with zero mass"):
        engine.generate([0], 6, None, coins=RandomCoins(gen), draws=RandomDraws(gen))
