"""The production draw helpers (rsd.core.coins.RandomDraws) against the laws the exact oracle enumerates."""

from __future__ import annotations

from dataclasses import asdict

import torch

from rsd.certify.chi_square import FALSE_ALARM, chi_square_test
from rsd.certify.exact_engine import EnumeratedDraws
from rsd.certify.outcomes import enumerate_outcomes
from rsd.certify.report import Check
from rsd.core.coins import RandomDraws


def _two_beam_steps(draws, width: int = 2) -> tuple:
    """Two stochastic beam search steps over fixed context-dependent laws (vocab 3): the kept (prefix) lists."""
    root = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    child = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6], [0.1, 0.7, 0.2]], dtype=torch.float64)
    parent, token, phi, key = draws.beam_step(torch.zeros(1, dtype=torch.float64),
                                              torch.zeros(1, dtype=torch.float64), root.log()[None], width)
    first = tuple(int(t) for t in token)
    parent, token, phi, key = draws.beam_step(phi, key, child[list(first)].log(), width)
    return first, tuple((first[int(b)], int(t)) for b, t in zip(parent, token))


def draw_helpers_check(samples: int = 20000, seed: int = 0) -> Check:
    """The production draw helpers (rsd.core.coins.RandomDraws) against the laws the exact oracle enumerates:
    Gumbel-top-3 of one law, and two stochastic beam search steps; chi-square each."""
    gen = torch.Generator().manual_seed(seed)
    p = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    experiments = {
        "Gumbel-top-3": lambda draws: tuple(draws.without_replacement(p[None], 3)[0]),
        "beam search, 2 steps": _two_beam_steps,
    }
    results, worst = {}, 1.0
    for name, run in experiments.items():
        law: dict = {}
        for out, w in enumerate_outcomes(lambda coins, run=run: run(EnumeratedDraws(coins))):
            law[out] = law.get(out, 0.0) + w
        counts: dict = {}
        production = RandomDraws(gen)
        for _ in range(samples):
            out = run(production)
            counts[out] = counts.get(out, 0) + 1
        res = chi_square_test(counts, law)
        results[name] = asdict(res)
        worst = min(worst, res.p_value)
    text = "; ".join(f"{n}: p = {r['p_value']:.3g} ({r['cells']} cells)" for n, r in results.items())
    return Check("draw helpers", worst >= FALSE_ALARM, f"{text}, samples {samples} each", results)
