"""Losslessness oracles (docs/algorithms.md#oracles): exact enumeration at one node, whole-engine Monte Carlo,
and the exact expected block efficiency of one step. Used by the tests and by `python -m rsd.certify`."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from scipy import stats

from rsd.rules import NodeRule, get_rule
from rsd.tree import DraftTree

FALSE_ALARM = 1e-3


def candidate_draws(p: torch.Tensor, m: int, scheme: str) -> list[tuple[tuple[int, ...], float]]:
    """Every ordered candidate tuple of length <= m a drafter draws from p, with its probability.

    Schemes: 'iid' (with replacement), 'without_replacement' (draw order; fewer than m when p's support is smaller),
    'single' (m = 1), 'deterministic' (the m most likely tokens, with probability 1).
    """
    support = [int(x) for x in (p > 0).nonzero().flatten()]
    if scheme == "deterministic":
        top = p.topk(min(m, len(support)))
        return [(tuple(int(x) for x in top.indices), 1.0)]
    if scheme == "single":
        return [((x,), float(p[x])) for x in support]
    if scheme == "iid":
        return [(c, float(torch.prod(p[list(c)].double()))) for c in itertools.product(support, repeat=m)]
    if scheme == "without_replacement":
        m = min(m, len(support))
        out = []
        for c in itertools.permutations(support, m):
            prob, left = 1.0, 1.0
            for x in c:
                prob *= float(p[x]) / left
                left -= float(p[x])
            out.append((c, prob))
        return out
    raise ValueError(f"unknown candidate scheme {scheme!r}")


def node_output_law(rule: str | NodeRule, q: torch.Tensor, p: torch.Tensor, m: int, scheme: str) -> torch.Tensor:
    """The exact law of the token a node emits (accepted candidate or residual draw), enumerating every branch."""
    rule = get_rule(rule)
    law = torch.zeros_like(q, dtype=torch.float64)
    for cands, prob in candidate_draws(p, m, scheme):
        node = rule(q, p, torch.tensor(cands))
        reach = 1.0
        for c, a in zip(cands, node.accept_probs().tolist()):
            law[c] += prob * reach * a
            reach *= 1 - a
        law += prob * reach * node.residual.double()
    return law


def expected_accepted(tree: DraftTree, q: torch.Tensor) -> float:
    """E[accepted depth | tree] for one walk over the tree: sum over nodes of P(walk reaches and accepts it)."""

    def below(v: int) -> float:
        cands = tree.candidates.get(v, [])
        if not cands:
            return 0.0
        tokens = torch.tensor([tree.tokens[c] for c in cands])
        law = get_rule(tree.rule)(q[v].double(), tree.draft_probs[v].double(), tokens)
        total, reach = 0.0, 1.0
        for c, a in zip(cands, law.accept_probs().tolist()):
            total += reach * a * (1.0 + below(c))
            reach *= 1 - a
        return total

    return below(0)


@torch.inference_mode()
def exact_sequence_law(target: torch.nn.Module, prompt: list[int], length: int,
                       probs_fn: Callable[[torch.Tensor], torch.Tensor]) -> dict[tuple[int, ...], float]:
    """P(first `length` generated tokens = s) for every s, from the target's own forward passes (no KV cache)."""
    law: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(length):
        prefixes = [s for s, w in law.items() if w > 0]
        ids = torch.tensor([prompt + list(s) for s in prefixes])
        nxt = probs_fn(target(input_ids=ids).logits[:, -1]).double()
        law = {s + (x,): law[s] * float(nxt[i, x]) for i, s in enumerate(prefixes) for x in range(nxt.shape[-1])}
    return law


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


def engine_monte_carlo(target: torch.nn.Module, draft: torch.nn.Module | None, drafter, params, prompt: list[int],
                       length: int, samples: int, seed: int = 0,
                       false_alarm: float = FALSE_ALARM) -> MonteCarloResult:
    """Run the whole engine (drafter, tree forward, KV compaction, walk) `samples` times from one prompt and test the
    law of the first `length` tokens against the target's exactly enumerated law. No EOS: every run emits `length`."""
    from rsd.engine import Engine
    from rsd.models.adapter import CausalLM
    from rsd.sampling import probs_from_logits, prompt_generator

    vocab = target.config.vocab_size
    engine = Engine(CausalLM(target), CausalLM(draft) if draft is not None else None, drafter, params, [], vocab)
    counts: dict[tuple[int, ...], int] = {}
    for i in range(samples):
        seq = tuple(engine.generate(prompt, length, prompt_generator(seed, f"mc-{i}")).new_token_ids)
        counts[seq] = counts.get(seq, 0) + 1
    law = exact_sequence_law(target, prompt, length, lambda logits: probs_from_logits(logits, params))
    return chi_square_test(counts, law, false_alarm)
