"""The verifier plug-in: how one step's drafted tree is verified against the target laws (docs/algorithms.md#verifiers).

All randomness of a verifier goes through a `Coins` object, so the same code runs in the engine (`RandomCoins`: the
prompt's torch.Generator) and in the exact-enumeration oracle (rsd.certify.outcomes: coins that enumerate every outcome
with its probability). A verifier returns the accepted node indices (root excluded) and the emitted tokens, and gives
the exact expected number of emitted tokens of a step (§10) without drawing anything. The built-in verifiers are also
`ReportsRootAcceptance`: they give the exact probability that the first emitted token is a root candidate
(docs/algorithms.md#optimum); `root_acceptance` reads it, nan for a verifier without it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

from rsd.core.coins import Coins, RandomCoins  # noqa: F401  (re-exported: the verifier API)
from rsd.drafters.base import Drafter
from rsd.errors import ConfigError
from rsd.registry import VERIFIERS, lookup

if TYPE_CHECKING:
    from rsd.core.rules import NodeRule
    from rsd.core.tree import DraftTree


@runtime_checkable
class Verifier(Protocol):
    """Verifies one step's tree. `q[v]` is the target law at node v, `tree.draft_probs[v]` the draft law, `rule` the
    drafter's node rule (a tree-level verifier may ignore it)."""

    name: str

    def verify(self, tree: "DraftTree", q: torch.Tensor, coins: Coins, eos: frozenset[int], rule: "str | NodeRule"
               ) -> tuple[list[int], list[int]]:
        """(accepted node indices, root excluded; emitted tokens). Stops after an emitted EOS."""

    def expected_yield(self, tree: "DraftTree", q: torch.Tensor, eos: frozenset[int], rule: "str | NodeRule"
                       ) -> float:
        """Exact E[number of emitted tokens | tree, laws] (docs/algorithms.md#expected-yield); draws no randomness."""


@runtime_checkable
class ReportsRootAcceptance(Protocol):
    """The optional part of a verifier: the exact probability of accepting a root candidate (a built-in has it)."""

    def root_acceptance(self, tree: "DraftTree", q: torch.Tensor, rule: "str | NodeRule") -> float:
        """P(the first emitted token is one of the root's candidates | tree, laws) (docs/algorithms.md#optimum);
        draws no randomness."""


def root_acceptance(verifier: Verifier, tree: "DraftTree", q: torch.Tensor, rule: "str | NodeRule") -> float:
    """The verifier's exact root acceptance of this step, or nan when it does not report one (a user's verifier
    need not: the step's record then holds no root acceptance)."""
    if isinstance(verifier, ReportsRootAcceptance):
        return verifier.root_acceptance(tree, q, rule)
    return math.nan


def get_verifier(spec: str | Verifier) -> Verifier:
    """A verifier from its name in rsd.registry.VERIFIERS or a dotted path 'pkg.mod.Obj' (a Verifier class,
    instantiated without arguments, or instance); anything else is a ConfigError."""
    return lookup(VERIFIERS, spec) if isinstance(spec, str) else spec


# Which drafts each tree-level verifier is exact on (docs/algorithms.md#verifiers): Block verification needs a chain
# drawn token by token; Traversal verification needs children drawn without replacement in draw order, or the merged
# i.i.d. trie. The drafter must also list the verifier in `tree_verifiers` (RSD-S trees are not certified).
_SCHEMES = {"block": ("single",), "traversal": ("without_replacement", "iid")}


def verifier_for(drafter: Drafter) -> Verifier:
    """The drafter's verifier, refusing a built-in tree-level verifier on drafts it is not exact on (ConfigError)."""
    spec = drafter.verifier
    if isinstance(spec, str) and spec in _SCHEMES:
        if spec not in drafter.tree_verifiers or drafter.candidate_scheme not in _SCHEMES[spec]:
            raise ConfigError(
                f"drafter.verifier={spec} is not exact on {drafter.name!r} trees (docs/algorithms.md#verifiers): "
                "block needs an SD chain (drafter=bv), traversal an RSD-C tree (drafter=tv) or the SpecInfer/SpecTr "
                "i.i.d. trie; "
                "use drafter.verifier=walk")
    return get_verifier(spec)
