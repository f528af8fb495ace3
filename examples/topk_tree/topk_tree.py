"""A user drafter living outside rsd: a deterministic top-b tree (EAGLE-style), verified by the one-hot rule.

Each node at depth l-1 gets the b_l most likely draft tokens as children, most likely first. The candidates are a
deterministic function of the context, so the RSD rule with a one-hot draft (ALGORITHMS.md §2, "deterministic
distinct candidates") verifies them exactly: accept c with probability r(c), else drop c from r and renormalise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rsd.budgets import Budget, branching_vectors
from rsd.drafters import Drafter
from rsd.tree import DraftTree


class TopKTree(Drafter):
    name = "topk_tree"
    rule = "onehot"
    candidate_scheme = "deterministic"

    def __init__(self, branching: Sequence[int]) -> None:
        self.branching = [int(b) for b in branching]

    @property
    def draft_length(self) -> int:
        return len(self.branching)

    @property
    def max_tree_size(self) -> int:
        size, width = 0, 1
        for b in self.branching:
            width *= b
            size += width
        return size

    @classmethod
    def shapes(cls, budget: Budget, params: Mapping[str, Any]) -> list[dict]:
        if budget.kind == "fixed_length":
            return [{"branching": [params["root_branching"]] + [1] * (budget.draft_length - 1)}]
        return [{"branching": b} for b in branching_vectors(budget.target_tokens)]

    def describe(self) -> dict:
        return {**super().describe(), "branching": self.branching}

    def build(self, tree: DraftTree, ctx) -> None:
        frontier = [0]
        for b in self.branching:
            probs = ctx.probs(tree, frontier)
            frontier = [tree.add_candidate(v, int(t)) for v, p in zip(frontier, probs)
                        for t, mass in zip(*p.topk(b)) if mass > 0]
            if not frontier:
                return
