"""Gumbel-top-k draws without replacement in draw order; stochastic beam search keeps distinct beams, preserves each
parent's maximum under the truncated-Gumbel shift, and its best beam is an exact sample of the sequence law."""

import torch

from rsd.certify.chi_square import chi_square_test
from rsd.core.gumbel import gumbel_topk, sbs_step, truncated_gumbel_shift

P = torch.tensor([0.4, 0.25, 0.2, 0.1, 0.05], dtype=torch.float64)


def test_gumbel_topk_first_and_second_draw_laws():
    gen = torch.Generator().manual_seed(0)
    n = 20000
    draws = gumbel_topk(P.expand(n, -1), 2, gen)
    counts: dict[tuple[int, ...], int] = {}
    for d in draws:
        counts[tuple(d)] = counts.get(tuple(d), 0) + 1
    law = {(a, b): float(P[a] * P[b] / (1 - P[a])) for a in range(5) for b in range(5) if a != b}
    result = chi_square_test(counts, law)
    assert result.passed, result
    first = torch.bincount(torch.tensor([d[0] for d in draws]), minlength=5) / n
    counts_first = {(i,): int(c * n) for i, c in enumerate(first)}
    assert chi_square_test(counts_first, {(i,): float(P[i]) for i in range(5)}).passed


def test_gumbel_topk_skips_zero_mass_and_is_distinct():
    p = torch.tensor([0.5, 0.0, 0.5, 0.0])
    gen = torch.Generator().manual_seed(1)
    for row in gumbel_topk(p.expand(100, -1), 3, gen):
        assert sorted(row) == [0, 2]


def test_truncated_shift_preserves_parent_max_and_order():
    gen = torch.Generator().manual_seed(2)
    keys = torch.randn(4, 7, generator=gen, dtype=torch.float64) * 3
    parent = torch.tensor([0.5, -1.0, 2.0, -3.0], dtype=torch.float64)
    shifted = truncated_gumbel_shift(parent, keys)
    torch.testing.assert_close(shifted.max(-1).values, parent, atol=1e-12, rtol=0)
    assert torch.equal(shifted.argsort(-1), keys.argsort(-1))
    assert (shifted <= parent[:, None] + 1e-12).all()


def test_sbs_beams_are_distinct_and_sorted():
    gen = torch.Generator().manual_seed(3)
    logp = torch.log_softmax(torch.randn(3, 6, generator=gen, dtype=torch.float64), -1)
    phi = torch.tensor([-0.1, -0.7, -1.2], dtype=torch.float64)
    key = torch.tensor([1.0, 0.3, -0.4], dtype=torch.float64)
    parent, token, new_phi, new_key = sbs_step(phi, key, logp, 5, gen)
    pairs = list(zip(parent.tolist(), token.tolist()))
    assert len(set(pairs)) == len(pairs) == 5
    assert torch.all(new_key[:-1] >= new_key[1:])
    torch.testing.assert_close(new_phi, phi[parent] + logp[parent, token])


def test_sbs_best_beam_is_an_exact_sample_of_the_sequence_law():
    """Kool et al. (2019): the top beam after two SBS steps is distributed as p(x1) p(x2 | x1)."""
    p1 = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    p2 = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6], [0.3, 0.4, 0.3]], dtype=torch.float64)
    gen = torch.Generator().manual_seed(4)
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(6000):
        parent, token, phi, key = sbs_step(torch.zeros(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64),
                                           p1.log()[None], 2, gen)
        parent2, token2, _, _ = sbs_step(phi, key, p2[token].log(), 2, gen)
        best = (int(token[parent2[0]]), int(token2[0]))
        counts[best] = counts.get(best, 0) + 1
    law = {(a, b): float(p1[a] * p2[a, b]) for a in range(3) for b in range(3)}
    result = chi_square_test(counts, law)
    assert result.passed, result


def test_sbs_step_shifts_only_each_beams_top_keys_and_keeps_the_same_pairs():
    """sbs_step shifts each beam's `width` largest raw keys only; the kept pairs must equal, bit for bit, those of
    shifting every key (the definition), zero-probability tokens included."""
    from rsd.core.gumbel import gumbel

    def shift_every_key(phi, key, logp, width, gen):
        phi_sx = phi[:, None] + logp.double()
        shifted = truncated_gumbel_shift(key, phi_sx + gumbel(logp.shape, gen, logp.device)).flatten()
        top = shifted.topk(min(width, shifted.numel()))
        flat, values = top.indices[torch.isfinite(top.values)], top.values[torch.isfinite(top.values)]
        return flat // logp.shape[-1], flat % logp.shape[-1], phi_sx.flatten()[flat], values

    rng = torch.Generator().manual_seed(0)
    for trial in range(200):
        n, vocab, width = (int(torch.randint(lo, hi, (), generator=rng)) for lo, hi in ((1, 5), (2, 30), (1, 8)))
        logits = 3 * torch.randn(n, vocab, generator=rng)
        if trial % 3 == 0:
            logits[:, torch.rand(vocab, generator=rng) < 0.5] = -float("inf")
            logits[:, 0] = 0.0
        phi = torch.randn(n, generator=rng, dtype=torch.float64)
        key = phi + torch.rand(n, generator=rng, dtype=torch.float64)
        args = (phi, key, logits.log_softmax(-1), width)
        for got, want in zip(sbs_step(*args, torch.Generator().manual_seed(trial)),
                             shift_every_key(*args, torch.Generator().manual_seed(trial))):
            assert torch.equal(got, want), trial
