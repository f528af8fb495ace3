"""Monte Carlo against an exact law (docs/algorithms.md#oracles): the chi-square goodness-of-fit test, its power
against an alternative law, and the whole engine sampled from one prompt and tested.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from scipy import stats

from rsd.certify.prefix_laws import exact_sequence_law

FALSE_ALARM = 1e-3


@dataclass
class MonteCarloResult:
    """Chi-square goodness of fit of sampled sequences against the exact law (cells with expected < 5 pooled)."""

    samples: int
    cells: int
    chi2: float
    critical: float
    p_value: float
    tv: float
    false_alarm: float = FALSE_ALARM

    @property
    def passed(self) -> bool:
        return self.p_value >= self.false_alarm


def chi_square_test(counts: dict[tuple[int, ...], int], law: dict[tuple[int, ...], float],
                    false_alarm: float = FALSE_ALARM) -> MonteCarloResult:
    """Goodness of fit; a sample outside the law's support fails outright (p-value 0)."""
    n = sum(counts.values())
    if any(law.get(s, 0.0) <= 0 for s in counts):
        return MonteCarloResult(n, len(law), float("inf"), 0.0, 0.0, 1.0, false_alarm)
    keys = sorted(law, key=lambda s: -law[s])
    expected = torch.tensor([law[s] * n for s in keys], dtype=torch.float64)
    observed = torch.tensor([counts.get(s, 0) for s in keys], dtype=torch.float64)
    big = expected >= 5
    exp_cells = torch.cat([expected[big], expected[~big].sum()[None]])
    obs_cells = torch.cat([observed[big], observed[~big].sum()[None]])
    if exp_cells[-1] < 5:  # fold a still-small pooled cell into the smallest kept one
        exp_cells = torch.cat([exp_cells[:-2], (exp_cells[-2] + exp_cells[-1])[None]])
        obs_cells = torch.cat([obs_cells[:-2], (obs_cells[-2] + obs_cells[-1])[None]])
    chi2 = float(((obs_cells - exp_cells) ** 2 / exp_cells).sum())
    dof = len(exp_cells) - 1
    tv = 0.5 * float((observed / n - expected / n).abs().sum())
    return MonteCarloResult(n, dof + 1, chi2, float(stats.chi2.isf(false_alarm, dof)), float(stats.chi2.sf(chi2, dof)),
                            tv, false_alarm)


def chi_square_power(null: dict[tuple[int, ...], float], alternative: dict[tuple[int, ...], float], samples: int,
                     false_alarm: float = FALSE_ALARM) -> float:
    """Power of `chi_square_test` at `samples` draws against `alternative`: the noncentral chi-square approximation
    on the same pooled cells (lambda = n * sum (p1 - p0)^2 / p0)."""
    keys = sorted(null, key=lambda s: -null[s])
    big = [s for s in keys if null[s] * samples >= 5]
    small = [s for s in keys if null[s] * samples < 5]
    cells = [([s], null[s], alternative.get(s, 0.0)) for s in big]
    if small:
        cells.append((small, sum(null[s] for s in small), sum(alternative.get(s, 0.0) for s in small)))
    lam = samples * sum((p1 - p0) ** 2 / p0 for _, p0, p1 in cells if p0 > 0)
    dof = len(cells) - 1
    return float(stats.ncx2.sf(stats.chi2.isf(false_alarm, dof), dof, lam))


def engine_monte_carlo(target: torch.nn.Module, draft: torch.nn.Module | None, drafter, params, prompt: list[int],
                       length: int, samples: int, seed: int = 0,
                       false_alarm: float = FALSE_ALARM) -> MonteCarloResult:
    """Run the whole engine (drafter, tree forward, KV compaction, walk) `samples` times from one prompt and test the
    law of the first `length` tokens against the target's exactly enumerated law. No EOS: every run emits `length`."""
    from rsd.core.engine import Engine
    from rsd.core.sampling import probs_from_logits, prompt_generator
    from rsd.models.adapter import CausalLM

    vocab = target.config.vocab_size
    engine = Engine(CausalLM(target), CausalLM(draft) if draft is not None else None, drafter, params, [], vocab)
    counts: dict[tuple[int, ...], int] = {}
    for i in range(samples):
        seq = tuple(engine.generate(prompt, length, prompt_generator(seed, f"mc-{i}")).new_token_ids)
        counts[seq] = counts.get(seq, 0) + 1
    law = exact_sequence_law(target, prompt, length, lambda logits: probs_from_logits(logits, params))
    return chi_square_test(counts, law, false_alarm)


__all__ = ["FALSE_ALARM", "MonteCarloResult", "chi_square_power", "chi_square_test", "engine_monte_carlo"]
