"""A user drafter living outside rsd: a deterministic top-b tree (EAGLE-style), verified by the one-hot rule.

Each node at depth l-1 gets the b_l most likely draft tokens as children, most likely first. The candidates are a
deterministic function of the context, so the one-hot rule (docs/algorithms.md#one-hot, deterministic distinct
candidates) verifies them exactly: accept c with probability r(c), else drop c from r and renormalise.
It reuses RSD-C's branching-vector shapes (and so its budgets) and replaces only how children are chosen.
"""

from __future__ import annotations

from rsd.core.tree import DraftTree
from rsd.drafters import RSDC


class TopKTree(RSDC):
    name = "topk_tree"
    rule = "onehot"
    candidate_scheme = "deterministic"

    def build(self, tree: DraftTree, ctx) -> None:
        frontier = [0]
        for b in self.branching[: getattr(ctx, "max_depth", None)]:
            probs = ctx.probs(tree, frontier)
            # topk returns (values, indices): the masses, then the token ids
            frontier = [tree.add_candidate(v, int(token)) for v, p in zip(frontier, probs)
                        for mass, token in zip(*p.topk(b)) if mass > 0]
            if not frontier:
                return
