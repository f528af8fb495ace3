"""Exact enumeration (docs/algorithms.md#oracles): every outcome of an experiment's coins with its probability,
driving the engine's own verification code (`verify_node`, every Verifier's `verify`) at one node or on a fixed tree.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TypeVar

import torch

from rsd.core.rules import NodeLaw, NodeRule, get_rule, verify_node
from rsd.core.sampling import most_likely
from rsd.core.tree import DraftTree
from rsd.verify.base import Verifier
from rsd.verify.walk import Walk

T = TypeVar("T")


def candidate_draws(p: torch.Tensor, m: int, scheme: str) -> list[tuple[tuple[int, ...], float]]:
    """Every ordered candidate tuple of length <= m a drafter draws from p, with its probability.

    Schemes: 'iid' (with replacement), 'without_replacement' (draw order; fewer than m when p's support is smaller),
    'single' (m = 1), 'deterministic' (the m most likely tokens, ties to the lower id, with probability 1).
    """
    support = [int(x) for x in (p > 0).nonzero().flatten()]
    if scheme == "deterministic":
        return [(tuple(most_likely(p[None], m)[0][0]), 1.0)]
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


class NondeterministicExperiment(RuntimeError):
    """A replay offered different outcomes at a coin than the first run did: the experiment draws randomness that
    does not go through its coins (e.g. a drafter that bypasses ctx.draws), so it cannot be enumerated."""


class ScriptedCoins:
    """Coins that replay a script of outcomes, then take the first outcome at every coin past it, noting the other
    outcomes there as `branches` (each a script to replay, with its probability). Certain outcomes (probability 0
    or 1, a one-token draw) consume no script entry, so replays stay aligned. Each script entry carries the outcomes
    offered when it was created; a replay offering others raises NondeterministicExperiment."""

    def __init__(self, script: tuple, prob: float = 1.0) -> None:
        self.script, self.used = script, 0
        self.prob = prob  # of the outcomes taken so far
        self.branches: list[tuple[tuple, float]] = []

    def choose(self, options: list[tuple[object, float]]) -> object:
        """One of `options` [(outcome, probability)]: replayed from the script, or the first one at a new coin."""
        if len(options) == 1:
            return options[0][0]
        offered = tuple(o for o, _ in options)
        if self.used < len(self.script):
            choice, was_offered = self.script[self.used]
            if was_offered != offered:
                raise NondeterministicExperiment("a replay offered other outcomes than the first run at coin "
                                                 f"{self.used}: randomness outside the coins")
            self.used += 1
            return choice
        self.branches += [(self.script + ((o, offered),), self.prob * w) for o, w in options[1:]]
        self.script += ((options[0][0], offered),)
        self.used += 1
        self.prob *= options[0][1]
        return options[0][0]

    def accept(self, prob: float) -> bool:
        prob = min(max(float(prob), 0.0), 1.0)
        return bool(self.choose([(o, w) for o, w in ((True, prob), (False, 1.0 - prob)) if w > 0]))

    def draw(self, probs: torch.Tensor) -> int:
        probs = probs.double()
        total = float(probs.sum())
        return int(self.choose([(int(i), float(probs[i]) / total) for i in (probs > 0).nonzero().flatten()]))


class TooManyOutcomes(RuntimeError):
    """The enumeration needed more replays than its budget."""


def enumerate_outcomes(experiment: Callable[[ScriptedCoins], T], max_runs: int | None = None
                       ) -> list[tuple[T, float]]:
    """Every outcome of `experiment(coins)` with its probability: a depth-first search over every coin (accept and
    draw) the experiment flips, running it once per outcome (each run replays a script, then takes the first outcome
    at every later coin and notes the others). The experiment must be deterministic given its coins (all randomness
    through them); a replay that is not raises NondeterministicExperiment. More than `max_runs` runs raise
    TooManyOutcomes."""
    outcomes, stack, runs = [], [((), 1.0)], 0
    while stack:
        runs += 1
        if max_runs is not None and runs > max_runs:
            raise TooManyOutcomes(f"more than {max_runs} replays")
        coins = ScriptedCoins(*stack.pop())
        result = experiment(coins)
        stack.extend(coins.branches)
        outcomes.append((result, coins.prob))
    return outcomes


def node_output_law(rule: str | NodeRule, q: torch.Tensor, p: torch.Tensor, m: int, scheme: str) -> torch.Tensor:
    """The exact law of the token a node emits, running the engine's `verify_node` on every candidate draw and every
    accept/reject/residual outcome."""
    law = torch.zeros_like(q, dtype=torch.float64)
    rule = get_rule(rule)
    for cands, prob in candidate_draws(p, m, scheme):
        tokens = torch.tensor(cands)
        node = rule(q, p, tokens)  # computed once per draw, not once per replay: the rule is deterministic

        def once(q_: torch.Tensor, p_: torch.Tensor, c_: torch.Tensor, node: NodeLaw = node) -> NodeLaw:
            return node

        for token, w in enumerate_outcomes(lambda coins, t=tokens, r=once: verify_node(r, q, p, t, coins)[1]):
            law[token] += prob * w
    return law


def expected_accepted(tree: DraftTree, q: torch.Tensor, rule: str | NodeRule) -> float:
    """E[accepted depth | tree] for one walk over the tree with `rule` (no EOS): the walk's exact expected yield
    minus one."""
    return Walk().expected_yield(tree, q, frozenset(), rule) - 1.0


def enumerated_yield(verifier: Verifier, tree: DraftTree, q: torch.Tensor, rule: str | NodeRule,
                     eos: frozenset[int] = frozenset()) -> float:
    """E[tokens emitted] on a fixed tree by enumerating every coin of `verifier.verify` (the check of §10)."""
    return sum(w * len(out) for out, w in
               enumerate_outcomes(lambda coins: verifier.verify(tree, q, coins, eos, rule)[1]))


__all__ = ["NondeterministicExperiment", "ScriptedCoins", "TooManyOutcomes", "candidate_draws", "enumerate_outcomes",
           "enumerated_yield", "expected_accepted", "node_output_law"]
