"""The sampling transform equals transformers' own temperature / top-k / top-p processing, and keeps exactly the
smallest most-likely set whose mass reaches top_p at exact boundaries (never nothing)."""

import pytest
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from rsd.core.sampling import SamplingParams, probs_from_logits


def transformers_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """generate()'s sampling law: the warpers it builds for these settings, in its order, then softmax."""
    scores = logits.float()
    if params.temperature != 1.0:
        scores = TemperatureLogitsWarper(params.temperature)(None, scores)
    if params.top_k:
        scores = TopKLogitsWarper(params.top_k)(None, scores)
    if params.top_p < 1.0:
        scores = TopPLogitsWarper(params.top_p)(None, scores)
    return scores.softmax(-1)


SETTINGS = [SamplingParams(1.0, top_p=0.9), SamplingParams(0.7, top_p=0.5), SamplingParams(1.3, top_k=10, top_p=0.8),
            SamplingParams(0.5, top_k=5), SamplingParams(2.0, top_p=0.3), SamplingParams(1.0, top_k=3, top_p=0.95),
            SamplingParams(1.7), SamplingParams(0.9, top_k=1, top_p=0.6)]


@pytest.mark.parametrize("params", SETTINGS, ids=str)
@pytest.mark.parametrize("ties", [False, True])
def test_equals_transformers_processing(params, ties):
    """Random logits; with `ties`, logits on a coarse grid over few tokens, so equal logits straddle the top-k and
    top-p boundaries (which tied token is dropped must match, not only how many)."""
    gen = torch.Generator().manual_seed(7)
    if ties:
        logits = torch.randint(-4, 4, (400, 6), generator=gen).float() / 2
    else:
        logits = 3 * torch.randn(400, 50, generator=gen)
    ours, ref = probs_from_logits(logits, params), transformers_probs(logits, params)
    assert torch.equal(ours > 0, ref > 0)
    torch.testing.assert_close(ours, ref, atol=1e-7, rtol=1e-6)
    assert torch.allclose(ours.sum(-1), torch.ones(len(ours)))


def kept(probs: list[float], top_p: float, perm: list[int] | None = None) -> list[float]:
    """probs_from_logits on float32 log-probs (the models' dtype; the masses below are exact in float32), tokens
    permuted."""
    perm = perm or list(range(len(probs)))
    logits = torch.tensor([probs[i] for i in perm], dtype=torch.float64).log().float()
    out = probs_from_logits(logits, SamplingParams(1.0, top_p=top_p))
    unperm = [0.0] * len(probs)
    for j, i in enumerate(perm):
        unperm[i] = float(out[j])
    return unperm


def test_top_p_boundary_from_the_issue():
    """p = [0.5, 0.3, 0.2]: top_p = 0.8 is reached by the first two tokens; top_p = 0.5 by the first alone."""
    assert kept([0.5, 0.3, 0.2], 0.8) == pytest.approx([0.625, 0.375, 0.0], abs=1e-7)
    assert kept([0.5, 0.3, 0.2], 0.5) == [1.0, 0.0, 0.0]
    assert kept([0.5, 0.3, 0.2], 0.81) == pytest.approx([0.5, 0.3, 0.2], abs=1e-7)


# Powers of two: every mass, every partial sum and 1 - top_p are exact, so these are the spec's boundaries exactly.
POW2 = [0.5, 0.25, 0.125, 0.0625, 0.0625]


@pytest.mark.parametrize("top_p, n_kept", [(2.0 ** -20, 1), (0.25, 1), (0.5, 1), (0.5 + 2.0 ** -20, 2), (0.75, 2),
                                           (0.875, 3), (0.9375, 4), (0.99, 5)])
@pytest.mark.parametrize("perm", [[0, 1, 2, 3, 4], [4, 0, 3, 2, 1]])
def test_top_p_keeps_the_smallest_prefix_reaching_top_p(top_p, n_kept, perm):
    """A token stays iff the mass strictly more likely than it is < top_p: exactly at the boundary the next token
    goes (no off-by-one either way), and the most likely token always stays."""
    out = kept(POW2, top_p, perm)
    support = [i for i, x in enumerate(out) if x > 0]
    if n_kept == 4:  # the two 1/16 tokens tie: the lower token id counts as less likely (transformers' order)
        assert support == [0, 1, 2, 3 if perm.index(3) > perm.index(4) else 4]
    else:
        assert support == list(range(n_kept))
    mass = sum(POW2[i] for i in support)
    assert out == pytest.approx([POW2[i] / mass if i in support else 0.0 for i in range(len(POW2))], abs=1e-7)


def test_top_k_keeps_ties_and_greedy_is_one_hot():
    logits = torch.tensor([1.0, 2.0, 2.0, 0.0])
    torch.testing.assert_close(probs_from_logits(logits, SamplingParams(1.0, top_k=1)),
                               torch.tensor([0.0, 0.5, 0.5, 0.0]))
    assert probs_from_logits(logits, SamplingParams(0.0)).tolist() == [0.0, 1.0, 0.0, 0.0]

