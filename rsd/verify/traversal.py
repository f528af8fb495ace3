"""Traversal verification (Weng et al., NeurIPS 2025, arXiv 2505.12398), implemented from docs/algorithms.md#verifiers.

Bottom-up, sequence-level acceptance: the first leaf (post-order, earliest-drawn child first) is attempted with its
weight w; on rejection its parent's row becomes a scaled residual, the parent loses that token from its draft law,
and the weights below the parent are recomputed. The root's attempt, last, always succeeds. The drafted children
must be drawn without replacement in draw order (RSD-C) or be the merged i.i.d. trie in first-appearance order.
"""

from __future__ import annotations

import torch

from rsd.coins import Coins
from rsd.tree import DraftTree


class TraversalState:
    """The mutable state of one traversal: rows Q_v, draft laws P_v, weights w_v, the remaining children."""

    def __init__(self, tree: DraftTree, q: torch.Tensor) -> None:
        self.tree, self.q = tree, q
        self.Q: dict[int, torch.Tensor] = {}  # rows that became residuals; others are q[v]
        self.P = {v: tree.draft_probs[v].to(q.device) for v in tree.candidates}
        self.kids = {v: tree.children(v) for v in tree.candidates}
        self.w = {0: 1.0}
        self.recompute(0)

    def row(self, v: int) -> torch.Tensor:
        return self.Q.get(v, self.q[v])

    def recompute(self, u: int) -> None:
        """w_c = min(w_u Q_u(x_c) / P_u(x_c), 1) top-down for every remaining descendant of u."""
        stack = [u]
        while stack:
            u = stack.pop()
            for c in self.kids.get(u, []):
                x = self.tree.tokens[c]
                num, den = self.w[u] * float(self.row(u)[x]), float(self.P[u][x])
                self.w[c] = min(num / den, 1.0) if den > 0 else float(num > 0)
                stack.append(c)

    def first_leaf(self) -> int:
        """From the root, step to the earliest-drawn remaining child until there is none."""
        v = 0
        while self.kids.get(v):
            v = self.kids[v][0]
        return v

    def reject(self, a: int) -> None:
        """Remove leaf a: its parent's row becomes norm((w_b Q_b - P_b)+) with weight S / (S + 1 - w_b), P_b loses
        a's token, and the weights below the parent are recomputed."""
        b, t = self.tree.parents[a], self.tree.tokens[a]
        self.update_parent(b, self.residual(b))  # with P_b before removing t (§9)
        self.remove(b, t)
        self.kids[b] = [c for c in self.kids[b] if c != a]
        self.recompute(b)

    def residual(self, b: int) -> torch.Tensor:
        """(w_b Q_b - P_b)+, unnormalised."""
        return (self.w[b] * self.row(b) - self.P[b]).clamp_min(0)

    def update_parent(self, b: int, r: torch.Tensor) -> None:
        """Q_b <- r / S and w_b <- S / (S + (1 - w_b)) if S = sum r > 0; else w_b <- 0 unless it is 1."""
        s = float(r.sum())
        if b != 0:  # w_root stays exactly 1
            if s > 0:
                self.w[b] = s / (s + (1.0 - self.w[b]))
            elif self.w[b] < 1:
                self.w[b] = 0.0
        if s > 0:
            self.Q[b] = r / s

    def remove(self, b: int, t: int) -> None:
        """P_b(t) <- 0, renormalised (left at zero when nothing remains)."""
        p = self.P[b].clone()
        p[t] = 0
        total = p.sum()
        self.P[b] = p / total if total > 0 else p

    def extra_law(self, a: int) -> torch.Tensor:
        """The law of the token after an accepted path: a's current row (a residual if a lost children)."""
        return self.row(a)


class Traversal:
    """Traversal verification of an RSD-C tree or a merged i.i.d. trie; on a chain it equals Block verification."""

    name = "traversal"
    state_cls = TraversalState
    _memo: tuple | None = None  # (tree, q, root acceptance) from the latest expected_yield

    def verify(self, tree: DraftTree, q: torch.Tensor, coins: Coins, eos: frozenset[int]
               ) -> tuple[list[int], list[int]]:
        state = self.state_cls(tree, q)
        while True:
            a = state.first_leaf()
            if a == 0:
                return [], [coins.draw(state.extra_law(0))]
            if coins.accept(state.w[a]):
                path, emitted = [], []
                for v in tree.path_to(a):
                    path.append(v)
                    emitted.append(tree.tokens[v])
                    if tree.tokens[v] in eos:
                        return path, emitted
                emitted.append(coins.draw(state.extra_law(a)))
                return path, emitted
            state.reject(a)

    def expected_yield(self, tree: DraftTree, q: torch.Tensor, eos: frozenset[int]) -> float:
        """sum_k prod_{j<k}(1 - w_j) w_k (depth_k + 1) over the attempts in order, the root's (w = 1) last (§10);
        a path cut by an EOS at depth i yields i."""
        state = self.state_cls(tree, q)
        total, survive = 0.0, 1.0
        while survive > 0 and (a := state.first_leaf()) != 0:
            path = tree.path_to(a)
            tokens = next((i + 1 for i, v in enumerate(path) if tree.tokens[v] in eos), len(path) + 1)
            total += survive * state.w[a] * tokens
            survive *= 1.0 - state.w[a]
            state.reject(a)
        self._memo = (tree, q, 1.0 - survive)
        return total + survive

    def root_acceptance(self, tree: DraftTree, q: torch.Tensor) -> float:
        """Exact P(the accepted path is not empty) = 1 - prod_k (1 - w_k) over the attempts before the root's. Taken
        from expected_yield's pass when it last ran on this same tree and q."""
        if self._memo is not None and self._memo[0] is tree and self._memo[1] is q:
            return self._memo[2]
        state = self.state_cls(tree, q)
        survive = 1.0
        while survive > 0 and (a := state.first_leaf()) != 0:
            survive *= 1.0 - state.w[a]
            state.reject(a)
        return 1.0 - survive

