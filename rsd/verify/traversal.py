"""Traversal verification (Weng et al., NeurIPS 2025, arXiv 2505.12398), implemented from docs/algorithms.md#verifiers.

Bottom-up, sequence-level acceptance: the first leaf (post-order, earliest-drawn child first) is attempted with its
weight w; on rejection its parent's row becomes a scaled residual, the parent loses that token from its draft law,
and the weights below the parent are recomputed. The root's attempt, last, always succeeds. The drafted children
must be drawn without replacement in draw order (RSD-C) or be the merged i.i.d. trie in first-appearance order.
"""

from __future__ import annotations

import torch

from rsd.core.coins import Coins, first_outcome
from rsd.core.rules import normalised
from rsd.core.tree import DraftTree


class TraversalState:
    """The mutable state of one traversal: rows Q_v, draft laws P_v, weights w_v (float64 scalars on q's device, so
    the state never reads the device), the remaining children."""

    def __init__(self, tree: DraftTree, q: torch.Tensor) -> None:
        self.tree, self.q = tree, q
        self.Q: dict[int, torch.Tensor] = {}  # rows that became residuals; others are q[v]
        self.P = {v: tree.draft_probs[v].to(q.device) for v in tree.candidates}
        self.kids = {v: tree.children(v) for v in tree.candidates}
        self.w = {0: torch.ones((), dtype=torch.float64, device=q.device)}
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
                num, den = self.w[u] * self.row(u)[x].double(), self.P[u][x].double()
                self.w[c] = torch.where(den > 0, (num / torch.where(den > 0, den, 1)).clamp(max=1.0),
                                        (num > 0).double())
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
        s = r.sum()
        positive = s > 0
        if b != 0:  # w_root stays exactly 1
            w, sd = torch.as_tensor(self.w[b], dtype=torch.float64), s.double()
            rest = sd + (1.0 - w)
            self.w[b] = torch.where(positive, sd / torch.where(rest > 0, rest, 1), torch.where(w < 1, 0.0, w))
        self.Q[b] = torch.where(positive, r / torch.where(positive, s, 1), self.row(b))

    def remove(self, b: int, t: int) -> None:
        """P_b(t) <- 0, renormalised (left at zero when nothing remains)."""
        p = self.P[b].clone()
        p[t] = 0
        self.P[b] = normalised(p, p)

    def extra_law(self, a: int) -> torch.Tensor:
        """The law of the token after an accepted path: a's current row (a residual if a lost children)."""
        return self.row(a)


class Traversal:
    """Traversal verification of an RSD-C tree or a merged i.i.d. trie; on a chain it equals Block verification.
    It applies no node rule: the drafter's `rule` argument is ignored."""

    name = "traversal"
    state_cls = TraversalState
    _memo: tuple | None = None  # (tree, q, root acceptance) from the latest expected_yield

    def verify(self, tree: DraftTree, q: torch.Tensor, coins: Coins, eos: frozenset[int], rule: object = None
               ) -> tuple[list[int], list[int]]:
        # Every attempt before the accepted one is a rejection, so the attempts' weights and laws are those of the
        # all-rejected sequence: computed on the device, then one batch of the same coins in the same order.
        state = self.state_cls(tree, q)
        attempts, weights, laws = [], [], []
        while (a := state.first_leaf()) != 0:
            attempts.append(a)
            weights.append(torch.as_tensor(state.w[a], dtype=torch.float64, device=q.device))
            laws.append(state.extra_law(a))
            state.reject(a)
        k = first_outcome(coins, torch.stack(weights) if weights else q.new_zeros(0), True)
        if k == len(attempts):
            return [], [coins.draw(state.extra_law(0))]
        path, emitted = [], []
        for v in tree.path_to(attempts[k]):
            path.append(v)
            emitted.append(tree.tokens[v])
            if tree.tokens[v] in eos:
                return path, emitted
        emitted.append(coins.draw(laws[k]))
        return path, emitted

    def expected_yield(self, tree: DraftTree, q: torch.Tensor, eos: frozenset[int], rule: object = None) -> float:
        """sum_k prod_{j<k}(1 - w_j) w_k (depth_k + 1) over the attempts in order, the root's (w = 1) last (§10);
        a path cut by an EOS at depth i yields i."""
        state = self.state_cls(tree, q)
        total, survive = 0.0, 1.0
        while (a := state.first_leaf()) != 0:  # an attempt after survive = 0 adds 0: no host read to stop early
            path = tree.path_to(a)
            tokens = next((i + 1 for i, v in enumerate(path) if tree.tokens[v] in eos), len(path) + 1)
            total += survive * state.w[a] * tokens
            survive *= 1.0 - state.w[a]
            state.reject(a)
        total, survive = torch.stack([torch.as_tensor(x, dtype=torch.float64, device=q.device)
                                      for x in (total, survive)]).tolist()  # one host read
        self._memo = (tree, q, 1.0 - survive)
        return total + survive

    def root_acceptance(self, tree: DraftTree, q: torch.Tensor, rule: object = None) -> float:
        """Exact P(the accepted path is not empty) = 1 - prod_k (1 - w_k) over the attempts before the root's. Taken
        from expected_yield's pass when it last ran on this same tree and q."""
        if self._memo is not None and self._memo[0] is tree and self._memo[1] is q:
            return self._memo[2]
        state = self.state_cls(tree, q)
        survive = 1.0
        while (a := state.first_leaf()) != 0:
            survive *= 1.0 - state.w[a]
            state.reject(a)
        return 1.0 - float(survive)

