"""RSD-C (constant branching, Gumbel-top-k) and RSD-S (stochastic beam search): drafts without replacement."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rsd.core.budgets import Budget, branching_vectors, factor_pairs
from rsd.core.tree import DraftTree
from rsd.drafters.base import DraftContext, Drafter


class RSDC(Drafter):
    """Every node at depth l-1 gets b_l children by Gumbel-top-b_l of its draft distribution, in key order."""

    candidate_scheme = "without_replacement"

    name = "rsd_c"
    rule = "rsd"
    tree_verifiers = ("traversal",)

    def __init__(self, branching: Sequence[int]) -> None:
        self.branching = [int(b) for b in branching]
        if not self.branching or min(self.branching) < 1:
            raise ValueError(f"rsd_c needs a non-empty branching vector of positive integers, got {list(branching)}")

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
        """(b, 1, ..., 1) with b = root_branching at a fixed draft length; every vector whose level sizes sum to B
        at a fixed target compute."""
        if budget.kind == "fixed_length":
            return [{"branching": [params["root_branching"]] + [1] * (budget.draft_length - 1)}]
        return [{"branching": b} for b in branching_vectors(budget.target_tokens, budget.max_depth)]

    def describe(self) -> dict:
        return {**super().describe(), "branching": list(self.branching)}

    def build(self, tree: DraftTree, ctx: DraftContext) -> None:
        frontier = [0]
        for b in self.branching[: ctx.max_depth]:
            draws = ctx.draws.without_replacement(ctx.probs(tree, frontier), b)
            frontier = [tree.add_candidate(v, token) for v, tokens in zip(frontier, draws) for token in tokens]
            if not frontier:
                return


class RSDS(Drafter):
    """Stochastic beam search of width W and depth L; a beam's kept children, by descending key, are its candidates."""

    candidate_scheme = "without_replacement"

    name = "rsd_s"
    rule = "rsd"

    def __init__(self, beam_width: int, draft_length: int) -> None:
        if beam_width < 1 or draft_length < 1:
            raise ValueError(f"rsd_s needs beam_width >= 1 and draft_length >= 1, got W={beam_width}, L={draft_length}")
        self.width, self.length = beam_width, draft_length

    @property
    def draft_length(self) -> int:
        return self.length

    @property
    def max_tree_size(self) -> int:
        return self.width * self.length

    @classmethod
    def shapes(cls, budget: Budget, params: Mapping[str, Any]) -> list[dict]:
        """W from the config at a fixed draft length; every W x L = B at a fixed target compute."""
        if budget.kind == "fixed_length":
            return [{"beam_width": params["beam_width"], "draft_length": budget.draft_length}]
        return [{"beam_width": w, "draft_length": n} for w, n in factor_pairs(budget.target_tokens)]

    def describe(self) -> dict:
        return {**super().describe(), "beam_width": self.width}

    def build(self, tree: DraftTree, ctx: DraftContext) -> None:
        beams = [0]
        phi = torch.zeros(1, dtype=torch.float64)
        key = torch.zeros(1, dtype=torch.float64)
        for _ in range(min(self.length, ctx.max_depth)):
            logp = ctx.probs(tree, beams).log()
            parent, token, phi, key = ctx.draws.beam_step(phi, key, logp, self.width)
            beams = [tree.add_candidate(beams[b], t) for b, t in zip(*torch.stack([parent, token]).tolist())]
            if not beams:
                return
