"""The production draw helpers (rsd.core.coins.RandomDraws) against the laws the exact oracle enumerates."""

from __future__ import annotations

from dataclasses import asdict

import torch

from rsd.certify.chi_square import FALSE_ALARM, chi_square_test
from rsd.certify.exact_engine import EnumeratedDraws
from rsd.certify.outcomes import enumerate_outcomes
from rsd.certify.report import Check
from rsd.core.coins import RandomDraws

# Fixed context-dependent laws (vocab 3) of the beam search experiment: the root's, and each first token's child law.
ROOT_LOGP = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64).log()
CHILD_LOGP = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6], [0.1, 0.7, 0.2]], dtype=torch.float64).log()
START = torch.zeros(1, dtype=torch.float64)


def _two_beam_steps(draws, width: int = 2) -> tuple:
    """Two stochastic beam search steps over ROOT_LOGP and CHILD_LOGP: the kept (prefix) lists."""
    parent, token, phi, key = draws.beam_step(START, START, ROOT_LOGP, width)
    first = tuple(token.tolist())
    parent, token, phi, key = draws.beam_step(phi, key, CHILD_LOGP[list(first)], width)
    return first, tuple((first[b], t) for b, t in zip(parent.tolist(), token.tolist()))


def draw_helpers_check(samples: int = 20000, seed: int = 0) -> Check:
    """The production draw helpers (rsd.core.coins.RandomDraws) against the laws the exact oracle enumerates:
    Gumbel-top-3 of one law, and two stochastic beam search steps; chi-square each."""
    gen = torch.Generator().manual_seed(seed)
    p = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    production = RandomDraws(gen)
    # (one enumerated outcome, every production sample): Gumbel-top-3 draws all samples as rows of one call, as the
    # engine draws a level's nodes; each beam search is its own pair of calls.
    experiments = {
        "Gumbel-top-3": (lambda draws: tuple(draws.without_replacement(p[None], 3)[0]),
                         lambda: map(tuple, production.without_replacement(p[None].expand(samples, -1), 3))),
        "beam search, 2 steps": (_two_beam_steps, lambda: (_two_beam_steps(production) for _ in range(samples))),
    }
    results, worst = {}, 1.0
    for name, (run, sample_all) in experiments.items():
        law: dict = {}
        for out, w in enumerate_outcomes(lambda coins, run=run: run(EnumeratedDraws(coins))):
            law[out] = law.get(out, 0.0) + w
        counts: dict = {}
        for out in sample_all():
            counts[out] = counts.get(out, 0) + 1
        res = chi_square_test(counts, law)
        results[name] = asdict(res)
        worst = min(worst, res.p_value)
    text = "; ".join(f"{n}: p = {r['p_value']:.3g} ({r['cells']} cells)" for n, r in results.items())
    return Check("draw helpers", worst >= FALSE_ALARM, f"{text}, samples {samples} each", results)
