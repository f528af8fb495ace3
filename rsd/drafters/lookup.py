"""Prompt lookup decoding (PLD): a model-free drafter that proposes what followed the latest n-gram match."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rsd.core.budgets import Budget
from rsd.core.tree import DraftTree
from rsd.drafters.base import DraftContext
from rsd.drafters.chain import SD


def lookup_continuation(tokens: Sequence[int], max_ngram: int, length: int) -> list[int]:
    """The up to `length` tokens that followed the latest earlier occurrence of the context's last n tokens, for the
    largest n <= max_ngram that occurs earlier; [] when no suffix (not even the last token) occurs before."""
    for n in range(min(max_ngram, len(tokens) - 1), 0, -1):
        suffix = list(tokens[-n:])
        for start in range(len(tokens) - n - 1, -1, -1):  # latest match first; never the suffix itself
            if list(tokens[start:start + n]) == suffix:
                return list(tokens[start + n:start + n + length])
    return []


class PLD(SD):
    """SD's chain (its shape, rule and verifiers), but of at most L tokens copied from the prompt and the text so far
    (no draft model), each proposed by a one-hot draft law: an accepted token costs no draft forward at all."""

    name = "pld"

    def __init__(self, draft_length: int, max_ngram: int = 3) -> None:
        if max_ngram < 1:
            raise ValueError(f"pld needs max_ngram >= 1, got {max_ngram}")
        super().__init__(draft_length)
        self.max_ngram = max_ngram

    @property
    def uses_draft_model(self) -> bool:
        return False

    @classmethod
    def shapes(cls, budget: Budget, params: Mapping[str, Any]) -> list[dict]:
        """SD's shapes, each with the lookup's n-gram size."""
        return [{**shape, "max_ngram": params.get("max_ngram", 3)} for shape in super().shapes(budget, params)]

    def describe(self) -> dict:
        return {**super().describe(), "max_ngram": self.max_ngram}

    def build(self, tree: DraftTree, ctx: DraftContext) -> None:
        v = 0
        for token in lookup_continuation(ctx.committed, self.max_ngram, min(self.length, ctx.max_depth)):
            law = torch.zeros(ctx.vocab_size)
            law[token] = 1.0
            tree.draft_probs[v] = law  # the law this node's one candidate is drawn from: a point mass
            v = tree.add_candidate(v, token)
