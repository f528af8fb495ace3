"""The drafter contract: build one step's DraftTree through a DraftContext and name the node rule that verifies it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

import torch

from rsd.core.budgets import Budget, InfeasibleBudgetError
from rsd.core.coins import Draws
from rsd.core.rules import NodeRule
from rsd.core.tree import DraftTree


class DraftContext(Protocol):
    """What a drafter sees during one step (the engine implements it; so does the exact oracle's table engine).

    `probs(tree, nodes)` returns p(.|node) [len(nodes), V] for each node in one draft forward and records it in
    `tree.draft_probs`: the root first, then level by level. `draws` is the only randomness a drafter may use.
    `max_depth` is the deepest level the drafter may draft this step. `committed` is the prompt and the text so far
    (the tree's root is its last token); `vocab_size` the width of every law. `prune(tree, keep)` drops every node
    outside `keep` (a kept node's parent must be kept) after the drafter has looked at more nodes than it verifies
    (EAGLE-2's reranking), renumbering the rest and the context's own per-node state; it returns old -> new index.
    """

    draws: Draws
    max_depth: int
    committed: Sequence[int]
    vocab_size: int

    def probs(self, tree: DraftTree, nodes: list[int]) -> torch.Tensor: ...

    def prune(self, tree: DraftTree, keep: list[int]) -> list[int]: ...


class Drafter(ABC):
    """A tree builder. Subclasses set `name` and `rule` (and optionally `verifier`) and implement `build`.

    Contract (what keeps the engine lossless): every candidate list of a node is drawn from exactly the
    distribution `ctx.probs` returned for that node, by the sampling scheme the rule assumes (i.i.d. for
    `specinfer`/`kseq`, without replacement in draw order for `rsd`, a single draw for `sd`); the number and order
    of candidates never depend on the drawn tokens' identities. A drafter drafts at most
    `min(draft_length, ctx.max_depth)` levels (the last step of a generation must not draft past its end).
    """

    name: ClassVar[str]
    rule: ClassVar[str | NodeRule]
    # How each node's candidates are drawn from its p: 'single', 'iid', 'without_replacement' (draw order), or None.
    # It lets `rsd.certify` run the exact-enumeration oracle on the rule; the Monte Carlo oracle needs nothing.
    candidate_scheme: ClassVar[str | None] = None
    # Who verifies the tree (rsd.verify): 'walk' (the node rule at each node, §4), 'block', 'traversal' (§9), or a
    # dotted path 'pkg.mod.Obj' to a user's Verifier; YAML may override it with drafter.verifier=...
    verifier: ClassVar[str] = "walk"
    # The built-in tree-level verifiers that are exact on this drafter's trees (checked before a run starts).
    tree_verifiers: ClassVar[tuple[str, ...]] = ()
    # The temperature of the draft laws `ctx.probs` returns; None: the target's sampling (any draft law is lossless).
    draft_temperature: float | None = None

    @property
    @abstractmethod
    def draft_length(self) -> int:
        """L: draft forward calls per step (the tree's depth); 0 means no draft model is used."""

    @property
    @abstractmethod
    def max_tree_size(self) -> int:
        """B: the most drafted (non-root) nodes the target verifies in one call."""

    @property
    def uses_draft_model(self) -> bool:
        """Whether `build` calls ctx.probs (a draft model forward); a model-free drafter (PLD) says False."""
        return self.draft_length > 0

    @abstractmethod
    def build(self, tree: DraftTree, ctx: DraftContext) -> None:
        """Grow `tree` (holding only its root) by calling ctx.probs on the root, then level by level, at most
        `ctx.max_depth` levels deep."""

    @classmethod
    def shapes(cls, budget: Budget, params: Mapping[str, Any]) -> list[dict]:
        """Every constructor-kwargs shape meeting `budget`; `params` are the drafter's YAML keys.

        Default: at a fixed draft length, `params` plus draft_length=L. Override for fixed target compute.
        """
        if budget.kind == "fixed_length":
            return [{**params, "draft_length": budget.draft_length}]
        raise InfeasibleBudgetError(f"drafter {cls.name!r} does not declare its shapes for a {budget.kind} budget "
                                    "(implement the classmethod `shapes`)")

    def describe(self) -> dict:
        """The shape parameters, for records and tables."""
        return {"draft_length": self.draft_length, "max_tree_size": self.max_tree_size}
