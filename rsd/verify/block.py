"""Block verification (Sun et al., ICLR 2025, Algorithm 2 of arXiv 2403.10444 v3), docs/algorithms.md#verifiers.

A chain X_1..X_L is verified as a block: with running weights a_i = min(a_{i-1} q_{i-1}(X_i) / p_{i-1}(X_i), 1)
and stopping probabilities h_i, the accepted length is tau = the largest i whose coin succeeds (no early stop at
the first failure), followed by Y ~ q_L (tau = L) or Y ~ norm((a_tau q_tau - p_tau)+).
"""

from __future__ import annotations

import math

import torch

from rsd.core.coins import Coins, first_outcome
from rsd.core.rules import normalised
from rsd.core.tree import DraftTree


def chain_nodes(tree: DraftTree) -> list[int]:
    """The chain's nodes from the root: [0, X_1, ..., X_L]; ValueError if some node has several children."""
    nodes = [0]
    while kids := tree.children(nodes[-1]):
        if len(kids) != 1:
            raise ValueError(f"block verification needs a chain, but node {nodes[-1]} has {len(kids)} children")
        nodes.append(kids[0])
    return nodes


class Block:
    """Block verification of an SD chain; exact, and accepts at least as much as the SD walk on the same chain.
    It applies no node rule: the drafter's `rule` argument is ignored."""

    name = "block"
    _memo: tuple | None = None  # (tree, q, root acceptance) from the latest expected_yield

    def weights(self, tree: DraftTree, q: torch.Tensor, nodes: list[int]) -> tuple[list[float], list[float]]:
        """(a_0..a_L, h_1..h_L) with a_0 = 1 and h as a list indexed 1..L (h[0] unused); one host read."""
        length = len(nodes) - 1
        if not length:
            return [1.0], [0.0]
        p = torch.stack([tree.draft_probs[u] for u in nodes[:-1]]).to(q.device)
        rows = torch.arange(length, device=q.device)
        cols = torch.tensor([tree.tokens[v] for v in nodes[1:]], device=q.device)
        num, den = q[nodes[:-1]][rows, cols].double(), p[rows, cols].double()
        # num / den, or the NodeLaw convention (1 iff num > 0) where den is 0
        ratio = torch.where(den > 0, num / torch.where(den > 0, den, 1), (num > 0).double())
        one = ratio.new_ones(())
        a = [one]
        for r in ratio:  # a running minimum of products: sequential, so each a_i is the same float as a scalar loop
            a.append(torch.minimum(a[-1] * r, one))
        a = torch.stack(a)
        # Z_i = sum((a_i q_i - p_i)+) in the laws' dtype, as the scalar a_i * q_i row would be computed
        z = (a[1:length, None].to(q.dtype) * q[nodes[1:length]] - p[1:]).clamp_min(0).sum(-1).double()
        rest = 1.0 - a[1:length]  # computed first (§9): the denominator is Z_i + (1 - a_i)
        h = torch.where(z + rest > 0, z / torch.where(z + rest > 0, z + rest, 1), 1.0)
        a_list, h_list = torch.stack([a, torch.cat([a.new_zeros(1), h, a[length:]])]).tolist()
        return a_list, h_list

    def choose(self, h: list[float], coins: Coins) -> int:
        """tau: scan i = L down to 1 and stop at the first success (= the largest i with eta_i <= h_i), else 0."""
        tried = first_outcome(coins, torch.tensor(h[:0:-1], dtype=torch.float64), True)
        return len(h) - 1 - tried if tried < len(h) - 1 else 0

    def final_law(self, tree: DraftTree, q: torch.Tensor, nodes: list[int], a: list[float], tau: int
                  ) -> torch.Tensor:
        """The extra token's law: q_L after a full accept, else norm((a_tau q_tau - p_tau)+) (fallback q_tau)."""
        v = nodes[tau]
        if tau == len(nodes) - 1:
            return q[v]
        return normalised((a[tau] * q[v] - tree.draft_probs[v].to(q.device)).clamp_min(0), q[v])

    def verify(self, tree: DraftTree, q: torch.Tensor, coins: Coins, eos: frozenset[int], rule: object = None
               ) -> tuple[list[int], list[int]]:
        nodes = chain_nodes(tree)
        a, h = self.weights(tree, q, nodes)
        tau = self.choose(h, coins)
        path, emitted = [], []
        for v in nodes[1: tau + 1]:
            path.append(v)
            emitted.append(tree.tokens[v])
            if tree.tokens[v] in eos:
                return path, emitted
        emitted.append(coins.draw(self.final_law(tree, q, nodes, a, tau)))
        return path, emitted

    def expected_yield(self, tree: DraftTree, q: torch.Tensor, eos: frozenset[int], rule: object = None) -> float:
        """1 + E[tau] with P(tau = i) = h_i prod_{j>i}(1 - h_j) (§9-10); a block cut by an EOS at X_i yields i."""
        nodes = chain_nodes(tree)
        _, h = self.weights(tree, q, nodes)
        self._memo = (tree, q, 1.0 - math.prod(1.0 - x for x in h[1:]))
        first_eos = next((i for i in range(1, len(nodes)) if tree.tokens[nodes[i]] in eos), None)
        total, later_fail = 0.0, 1.0
        for i in range(len(nodes) - 1, -1, -1):
            p_tau = later_fail * (h[i] if i > 0 else 1.0)
            total += p_tau * (first_eos if first_eos is not None and first_eos <= i else i + 1)
            if i > 0:
                later_fail *= 1.0 - h[i]
        return total

    def root_acceptance(self, tree: DraftTree, q: torch.Tensor, rule: object = None) -> float:
        """Exact P(tau >= 1) = 1 - prod_i (1 - h_i): the first emitted token is the drafted X_1. Taken from
        expected_yield's pass when it last ran on this same tree and q."""
        if self._memo is not None and self._memo[0] is tree and self._memo[1] is q:
            return self._memo[2]
        nodes = chain_nodes(tree)
        _, h = self.weights(tree, q, nodes)
        return 1.0 - math.prod(1.0 - x for x in h[1:])

