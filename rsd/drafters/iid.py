"""SpecInfer and SpecTr: K i.i.d. draft sequences of length L merged into a trie (repeats kept as candidates)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rsd.core.budgets import Budget, factor_pairs
from rsd.core.coins import iid_rows
from rsd.core.tree import DraftTree
from rsd.drafters.base import DraftContext, Drafter


class IIDTrie(Drafter):
    """K i.i.d. chains x ~ p(.|prefix) of length L; a node's candidates: the next tokens of the sequences through it."""

    candidate_scheme = "iid"
    # Traversal is exact on the merged trie, siblings in first-appearance order (docs/algorithms.md#verifiers).
    tree_verifiers = ("traversal",)

    def __init__(self, num_sequences: int, draft_length: int) -> None:
        if num_sequences < 1 or draft_length < 1:
            raise ValueError(f"{self.name} needs num_sequences >= 1 and draft_length >= 1, "
                             f"got K={num_sequences}, L={draft_length}")
        self.k, self.length = num_sequences, draft_length

    @property
    def draft_length(self) -> int:
        return self.length

    @property
    def max_tree_size(self) -> int:
        return self.k * self.length

    @classmethod
    def shapes(cls, budget: Budget, params: Mapping[str, Any]) -> list[dict]:
        """K from the config at a fixed draft length; every K x L = B at a fixed target compute."""
        if budget.kind == "fixed_length":
            return [{"num_sequences": params["num_sequences"], "draft_length": budget.draft_length}]
        return [{"num_sequences": k, "draft_length": n} for k, n in factor_pairs(budget.target_tokens)]

    def describe(self) -> dict:
        return {**super().describe(), "num_sequences": self.k}

    def build(self, tree: DraftTree, ctx: DraftContext) -> None:
        at = [0] * self.k  # the trie node each sequence has reached
        for _ in range(min(self.length, ctx.max_depth)):
            nodes = list(dict.fromkeys(at))
            seqs = [[s for s in range(self.k) if at[s] == v] for v in nodes]
            draws = iid_rows(ctx.draws, ctx.probs(tree, nodes), [len(group) for group in seqs])
            for v, group, tokens in zip(nodes, seqs, draws):
                for s, token in zip(group, tokens):
                    at[s] = tree.add_candidate(v, token, reuse=True)


class SpecInfer(IIDTrie):
    """SpecInfer: the i.i.d. trie verified by multi-step speculative sampling."""

    name = "specinfer"
    rule = "specinfer"


class SpecTr(IIDTrie):
    """SpecTr: the i.i.d. trie verified by K-SEQ over the sequences still alive at each node."""

    name = "spectr"
    rule = "kseq"
