"""AR (no draft) and SD (a single chain verified by speculative sampling)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rsd.core.budgets import Budget
from rsd.core.tree import DraftTree
from rsd.drafters.base import DraftContext, Drafter


class AR(Drafter):
    """Autoregressive decoding: no tree, one token per target call (the baseline)."""

    name = "ar"
    rule = "sd"

    @property
    def draft_length(self) -> int:
        return 0

    @property
    def max_tree_size(self) -> int:
        return 0

    @classmethod
    def shapes(cls, budget: Budget, params: Mapping[str, Any]) -> list[dict]:
        return [{}]

    def build(self, tree: DraftTree, ctx: DraftContext) -> None:
        return None


class SD(Drafter):
    """Speculative decoding: a chain x_i ~ p(.|x_<i) of length L, verified with the SD rule."""

    candidate_scheme = "single"

    name = "sd"
    rule = "sd"
    tree_verifiers = ("block",)

    def __init__(self, draft_length: int) -> None:
        if draft_length < 1:
            raise ValueError(f"{self.name} needs draft_length >= 1, got {draft_length}")
        self.length = draft_length

    @property
    def draft_length(self) -> int:
        return self.length

    @property
    def max_tree_size(self) -> int:
        return self.length

    @classmethod
    def shapes(cls, budget: Budget, params: Mapping[str, Any]) -> list[dict]:
        """L at a fixed draft length; L = B at a fixed target compute."""
        return [{"draft_length": budget.draft_length if budget.kind == "fixed_length" else budget.target_tokens}]

    def build(self, tree: DraftTree, ctx: DraftContext) -> None:
        v = 0
        for _ in range(min(self.length, ctx.max_depth)):
            v = tree.add_candidate(v, ctx.draws.one(ctx.probs(tree, [v])[0]))
