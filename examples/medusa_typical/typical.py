"""Medusa's typical acceptance (Cai et al. 2024, Medusa-2 §2.3.1) as a verifier plug-in: a known-LOSSY reference.

A drafted token x after context c is accepted when the target gives it more than a threshold that falls with the
target's entropy: q(x | c) > min(epsilon, delta * exp(-H(q(. | c)))). The step takes the longest accepted path from
the root (ties: the earlier candidate), then emits one token drawn from the target law where the path stops. The
defaults are Medusa's (posterior_threshold 0.09, posterior_alpha 0.3). Nothing here corrects for what the threshold
keeps or drops, so the emitted text does not follow the target's law: `python -m rsd.certify` must fail it, and its
exact-engine and Monte Carlo checks print how far (total variation) it is from the target.

    PYTHONPATH=examples/medusa_typical python -m rsd.certify drafter=eagle2 +drafter.verifier=typical.TypicalAcceptance
"""

from __future__ import annotations

import torch

from rsd.core.coins import Coins
from rsd.core.tree import DraftTree


class TypicalAcceptance:
    """Entropy-thresholded acceptance of the longest drafted path; the bonus token is drawn from the target law."""

    name = "typical"

    def __init__(self, epsilon: float = 0.09, delta: float = 0.3) -> None:
        self.epsilon, self.delta = epsilon, delta

    def typical(self, q: torch.Tensor, token: int) -> bool:
        """q(token) > min(epsilon, delta * exp(-H(q))), H in nats."""
        entropy = -(q * q.clamp_min(1e-30).log()).sum()
        return bool(q[token] > torch.minimum(torch.tensor(self.epsilon, dtype=q.dtype), self.delta * (-entropy).exp()))

    def longest_path(self, tree: DraftTree, q: torch.Tensor, v: int, eos: frozenset[int]) -> list[int]:
        """The longest chain of typical children below v (an accepted EOS ends a chain), earlier candidates first."""
        best: list[int] = []
        for c in tree.children(v):
            if self.typical(q[v], tree.tokens[c]):
                below = [] if tree.tokens[c] in eos else self.longest_path(tree, q, c, eos)
                if 1 + len(below) > len(best):
                    best = [c, *below]
        return best

    def verify(self, tree: DraftTree, q: torch.Tensor, coins: Coins, eos: frozenset[int], rule: object
               ) -> tuple[list[int], list[int]]:
        path = self.longest_path(tree, q, 0, eos)
        emitted = [tree.tokens[v] for v in path]
        if not (path and emitted[-1] in eos):
            emitted.append(coins.draw(q[path[-1] if path else 0]))
        return path, emitted

    def expected_yield(self, tree: DraftTree, q: torch.Tensor, eos: frozenset[int], rule: object) -> float:
        """The path is a deterministic function of the laws; only the last token is drawn."""
        path = self.longest_path(tree, q, 0, eos)
        return float(len(path) + (0 if path and tree.tokens[path[-1]] in eos else 1))
