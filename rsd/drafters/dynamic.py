"""EAGLE-2's dynamic draft tree (Li et al. 2024): expand the most likely nodes, keep the N most likely, verify the
deterministic candidates by recursive rejection with a one-hot draft (docs/algorithms.md#dynamic-tree)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rsd.core.budgets import Budget, factor_pairs
from rsd.core.sampling import most_likely
from rsd.core.tree import DraftTree
from rsd.drafters.base import DraftContext, Drafter


class Eagle2(Drafter):
    """Depth D: each level, the top-k children (by draft probability) of the k best nodes so far of the level before,
    ranked by the cumulative draft log-probability of their path; then the N best nodes of all levels are kept.

    Every candidate list is the m most likely tokens of its node's draft law (m = its kept children), a deterministic
    function of the context, so the one-hot rule verifies it losslessly whatever N, k and D are. The draft laws are
    at `draft_temperature` (EAGLE-2's: the draft's softmax, 1.0) whatever the target's sampling, so a greedy target
    still gets a k-wide tree; null drafts at the target's temperature (a one-hot law, a chain, when it is greedy).
    """

    candidate_scheme = "deterministic"

    name = "eagle2"
    rule = "onehot"

    def __init__(self, top_k: int, draft_length: int, tree_size: int, draft_temperature: float | None = 1.0) -> None:
        if draft_temperature is not None and not draft_temperature >= 0:
            raise ValueError(f"eagle2 needs draft_temperature >= 0 or null (the target's), got {draft_temperature}")
        if top_k < 1 or draft_length < 1 or tree_size < 1:
            raise ValueError(f"eagle2 needs top_k, draft_length and tree_size >= 1, got k={top_k}, D={draft_length}, "
                             f"N={tree_size}")
        pool = top_k + (draft_length - 1) * top_k * top_k
        if tree_size > pool:
            raise ValueError(f"eagle2 with k={top_k}, D={draft_length} looks at {pool} nodes, fewer than "
                             f"N={tree_size}: raise top_k or draft_length, or lower tree_size")
        self.top_k, self.depth, self.tree_size = top_k, draft_length, tree_size
        self.draft_temperature = draft_temperature

    @property
    def draft_length(self) -> int:
        return self.depth

    @property
    def max_tree_size(self) -> int:
        return self.tree_size

    @classmethod
    def shapes(cls, budget: Budget, params: Mapping[str, Any]) -> list[dict]:
        """k from the config and N = k x L at a fixed draft length (the tree size of the K = 3 methods); N = B with
        every k x D = B at a fixed target compute; each with the config's draft temperature."""
        temperature = {"draft_temperature": params.get("draft_temperature", 1.0)}
        if budget.kind == "fixed_length":
            k = params["top_k"]
            return [{"top_k": k, "draft_length": budget.draft_length, "tree_size": k * budget.draft_length,
                     **temperature}]
        return [{"top_k": k, "draft_length": d, "tree_size": budget.target_tokens, **temperature}
                for k, d in factor_pairs(budget.target_tokens)]

    def describe(self) -> dict:
        return {**super().describe(), "top_k": self.top_k, "draft_temperature": self.draft_temperature}

    def build(self, tree: DraftTree, ctx: DraftContext) -> None:
        score = [0.0]  # cumulative draft log-probability of each node's path, by node index
        frontier = [0]
        for level in range(min(self.depth, ctx.max_depth)):
            layer = []
            for v, (tokens, ps) in zip(frontier, most_likely(ctx.probs(tree, frontier), self.top_k)):
                for token, p in zip(tokens, ps):
                    layer.append(tree.add_candidate(v, token))
                    score.append(score[v] + math.log(p))
            if level + 1 == min(self.depth, ctx.max_depth):
                break
            frontier = sorted(layer, key=lambda c: (-score[c], c))[: self.top_k]
            if not frontier:
                break
        # A child scores at most its parent and comes after it, so the N best by (score, index) contain their parents.
        ctx.prune(tree, sorted(range(1, len(tree)), key=lambda c: (-score[c], c))[: self.tree_size])
