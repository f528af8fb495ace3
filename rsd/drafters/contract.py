"""The checks of the drafter contract (rsd.drafters.base.Drafter) that the engine runs on every drafted tree."""

from __future__ import annotations

import torch

from rsd.core.plugin import is_token
from rsd.core.tree import DraftTree
from rsd.errors import RsdError


class DrafterContractError(RsdError, RuntimeError):
    """A drafter broke the contract of `rsd.drafters.base.Drafter` (the message names the drafter and the rule)."""


def check_drafted_tree(tree: DraftTree, max_depth: int | None, drafter: str) -> None:
    """The contract checks every step runs: depth <= max_depth, and every drafted token has positive mass under its
    parent's recorded draft law (a token drawn from another node's law usually has none somewhere). One host sync."""
    mass_ok = drafted_mass_flag(tree, max_depth, drafter)
    if mass_ok is not None and not bool(mass_ok):
        raise zero_mass_error(drafter)


def zero_mass_error(drafter: str) -> DrafterContractError:
    """The error for a drafted token without mass under its parent's draft law (raised once the flag is read)."""
    return DrafterContractError(f"drafter {drafter!r} drafted a token with zero mass under its parent's draft law: "
                                "each node's candidates must be drawn (through ctx.draws) from the law ctx.probs "
                                "returned for that node")


def drafted_mass_flag(tree: DraftTree, max_depth: int | None, drafter: str) -> torch.Tensor | None:
    """`check_drafted_tree` without its host read: raises for what the host sees (depth, a missing law) and returns
    the device flag 'every drafted token has positive mass' (None for a tree without drafted tokens)."""
    if max_depth is not None and tree.depth > max_depth:
        raise DrafterContractError(f"drafter {drafter!r} drafted {tree.depth} levels where ctx.max_depth is "
                                   f"{max_depth}: draft at most min(draft_length, ctx.max_depth) levels")
    if len(tree) == 1:
        return None
    by_parent: dict[int, list[int]] = {}
    for v in range(1, len(tree)):
        by_parent.setdefault(tree.parents[v], []).append(tree.tokens[v])
    missing = [u for u in by_parent if u not in tree.draft_probs]
    if missing:
        raise DrafterContractError(f"drafter {drafter!r} added children to node(s) {missing} without their draft law: "
                                   "call ctx.probs on a node before drawing its candidates")
    for u, toks in by_parent.items():
        size = tree.draft_probs[u].shape[-1]
        bad = [t for t in toks if not is_token(t, size)]
        if bad:
            raise DrafterContractError(f"drafter {drafter!r} drafted token {bad[0]!r:.40} ({type(bad[0]).__name__}) "
                                       f"under node "
                                       f"{u}: a drafted token must be a Python int in [0, {size}) (the draft law's "
                                       "vocabulary); convert a tensor with int(...)")
    mass = torch.cat([tree.draft_probs[u][torch.tensor(toks, device=tree.draft_probs[u].device)]
                      for u, toks in by_parent.items()])
    return (mass > 0).all()
