"""The drafter contract: build one step's DraftTree through a DraftContext, name how it is verified and which
shapes a sweep runs; `Drafter` combines the three parts (TreeBuilder, VerificationPolicy, ShapeSpace)."""

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


class TreeBuilder(ABC):
    """The part of a drafter that grows one step's tree: its `name`, `build`, the tree's bounds (`draft_length`,
    `max_tree_size`) and the draft model's use (`uses_draft_model`, `draft_temperature`)."""

    name: ClassVar[str]
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


class VerificationPolicy:
    """The part of a drafter that says how its trees are verified: the node `rule`, the `candidate_scheme` its
    candidates are drawn by, the `verifier` and the tree-level verifiers exact on its trees (`tree_verifiers`)."""

    rule: ClassVar[str | NodeRule]
    # How each node's candidates are drawn from its p: 'single', 'iid', 'without_replacement' (draw order), or None.
    # It lets `rsd.certify` run the exact-enumeration oracle on the rule; the Monte Carlo oracle needs nothing.
    candidate_scheme: ClassVar[str | None] = None
    # Who verifies the tree (rsd.verify): 'walk' (the node rule at each node, §4), 'block', 'traversal' (§9), or a
    # dotted path 'pkg.mod.Obj' to a user's Verifier; YAML may override it with drafter.verifier=...
    verifier: ClassVar[str] = "walk"
    # The built-in tree-level verifiers that are exact on this drafter's trees (checked before a run starts).
    tree_verifiers: ClassVar[tuple[str, ...]] = ()


class ShapeSpace:
    """The part of a drafter a sweep enumerates: the constructor shapes meeting a budget (`shapes`) and the shape of
    one drafter in records (`describe`). Its defaults read the tree builder's `name`, `draft_length` and
    `max_tree_size` (a Drafter has both parts)."""

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


class Drafter(TreeBuilder, VerificationPolicy, ShapeSpace):
    """A drafter: one class (and one YAML) of three parts. Subclasses set `name` and `rule` (and optionally
    `verifier`) and implement `build`.

    - tree building (TreeBuilder): `name`, `build`, `draft_length`, `max_tree_size`, `uses_draft_model`,
      `draft_temperature`;
    - verification policy (VerificationPolicy): `rule`, `candidate_scheme`, `verifier`, `tree_verifiers`;
    - shape space (ShapeSpace): `shapes`, `describe`.

    Contract (what keeps the engine lossless): every candidate list of a node is drawn from exactly the
    distribution `ctx.probs` returned for that node, by the sampling scheme the rule assumes (i.i.d. for
    `specinfer`/`kseq`, without replacement in draw order for `rsd`, a single draw for `sd`); the number and order
    of candidates never depend on the drawn tokens' identities. A drafter drafts at most
    `min(draft_length, ctx.max_depth)` levels (the last step of a generation must not draft past its end).
    """
