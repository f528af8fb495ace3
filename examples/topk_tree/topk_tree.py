"""A user drafter living outside rsd: a deterministic top-b tree (EAGLE-style), verified by the one-hot rule.

Each node at depth l-1 gets the b_l most likely draft tokens as children, most likely first. The candidates are a
deterministic function of the context, so the RSD rule with a one-hot draft (ALGORITHMS.md §2, "deterministic
distinct candidates") verifies them exactly: accept c with probability r(c), else drop c from r and renormalise.
It reuses RSD-C's branching-vector shapes (and so its budgets) and replaces only how children are chosen.
"""

from __future__ import annotations

from rsd.drafters import RSDC
from rsd.tree import DraftTree


class TopKTree(RSDC):
    name = "topk_tree"
    rule = "onehot"
    candidate_scheme = "deterministic"

    def build(self, tree: DraftTree, ctx) -> None:
        frontier = [0]
        for b in self.branching:
            probs = ctx.probs(tree, frontier)
            frontier = [tree.add_candidate(v, int(t)) for v, p in zip(frontier, probs)
                        for t, mass in zip(*p.topk(b)) if mass > 0]
            if not frontier:
                return
