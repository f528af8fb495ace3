"""Prompt lookup decoding (PLD): a model-free drafter that proposes what followed the latest n-gram match."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rsd.budgets import Budget
from rsd.drafters.base import DraftContext, Drafter
from rsd.tree import DraftTree


def lookup_continuation(tokens: Sequence[int], max_ngram: int, length: int) -> list[int]:
    """The up to `length` tokens that followed the latest earlier occurrence of the context's last n tokens, for the
    largest n <= max_ngram that occurs earlier; [] when no suffix (not even the last token) occurs before."""
    for n in range(min(max_ngram, len(tokens) - 1), 0, -1):
        suffix = list(tokens[-n:])
        for start in range(len(tokens) - n - 1, -1, -1):  # latest match first; never the suffix itself
            if list(tokens[start:start + n]) == suffix:
                return list(tokens[start + n:start + n + length])
    return []


class PLD(Drafter):
    """A chain of at most L tokens copied from the prompt and the text so far (no draft model), each proposed by a
    one-hot draft law and verified with the SD rule: an accepted token costs no draft forward at all."""

    candidate_scheme = "single"

    name = "pld"
    rule = "sd"
    tree_verifiers = ("block",)

    def __init__(self, draft_length: int, max_ngram: int = 3) -> None:
        if draft_length < 1:
            raise ValueError(f"pld needs draft_length >= 1, got {draft_length}")
        if max_ngram < 1:
            raise ValueError(f"pld needs max_ngram >= 1, got {max_ngram}")
        self.length, self.max_ngram = draft_length, max_ngram

    @property
    def draft_length(self) -> int:
        return self.length

    @property
    def max_tree_size(self) -> int:
        return self.length

    @property
    def uses_draft_model(self) -> bool:
        return False

    @classmethod
    def shapes(cls, budget: Budget, params: Mapping[str, Any]) -> list[dict]:
        """L at a fixed draft length; L = B at a fixed target compute (a chain, like SD)."""
        length = budget.draft_length if budget.kind == "fixed_length" else budget.target_tokens
        return [{"draft_length": length, "max_ngram": params.get("max_ngram", 3)}]

    def describe(self) -> dict:
        return {**super().describe(), "max_ngram": self.max_ngram}

    def build(self, tree: DraftTree, ctx: DraftContext) -> None:
        v = 0
        for token in lookup_continuation(ctx.committed, self.max_ngram, min(self.length, ctx.max_depth)):
            law = torch.zeros(ctx.vocab_size)
            law[token] = 1.0
            tree.draft_probs[v] = law  # the law this node's one candidate is drawn from: a point mass
            v = tree.add_candidate(v, token)
