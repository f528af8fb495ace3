"""The checks of the verifier contract (rsd.verify.base.Verifier) that the engine runs on every step: the laws it
hands a verifier, what verify returns and what expected_yield states."""

from __future__ import annotations

import math

import torch

from rsd.core.plugin import is_token, plugin_call
from rsd.core.tree import DraftTree
from rsd.errors import RsdError
from rsd.verify.base import Verifier


class VerifierContractError(RsdError, RuntimeError):
    """A verifier broke the contract of `rsd.verify.base.Verifier` (the message names the verifier and the rule)."""


def verify_call(verifier: Verifier, name: str, *args: object) -> tuple[list[int], list[int]]:
    """`verifier.verify(*args)` through plugin_call, refused unless it returned a pair (path, emitted tokens);
    check_verified checks the pair."""
    result = plugin_call(verifier.verify, f"verifier {name!r} verify", *args)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise VerifierContractError(f"verifier {name!r} returned {result!r:.60} from verify; it must return "
                                    "(a list of accepted nodes, a list of emitted tokens)")
    return result[0], result[1]


def check_verified(tree: DraftTree, path: list[int], emitted: list[int], eos: frozenset[int], vocab_size: int,
                   verifier: str) -> None:
    """The verifier's output obeys its contract: `path` descends from the root's child, one node per level, and
    `emitted` is the path's tokens plus exactly one more token (none after an accepted EOS), each in [0, vocab_size).
    Pure Python on the lists: no host sync."""
    def fail(rule: str) -> VerifierContractError:
        return VerifierContractError(f"verifier {verifier!r} returned path {path!r} and tokens {emitted!r}, which "
                                     f"breaks its contract: {rule}")

    if not isinstance(path, (list, tuple)) or not isinstance(emitted, (list, tuple)):
        raise fail("verify must return (a list of accepted nodes, a list of emitted tokens)")
    parent = 0
    for v in path:
        if not is_token(v, len(tree)) or v == 0 or tree.parents[v] != parent:
            raise fail(f"the accepted nodes must be a path of the drafted tree ({len(tree)} nodes) from a child of "
                       "the root (node 0, excluded) down, each node a child of the one before")
        parent = v
    tokens = [tree.tokens[v] for v in path]
    extra = 0 if tokens and tokens[-1] in eos else 1
    if any(not is_token(t, vocab_size) for t in emitted):
        raise fail(f"an emitted token must be a Python int (not a bool or a tensor) in [0, {vocab_size})")
    if list(emitted[: len(tokens)]) != tokens or len(emitted) != len(tokens) + extra:
        raise fail("the emitted tokens must be the accepted nodes' tokens plus one more token (none after an "
                   "accepted EOS)")


def check_expected_yield(value: float, tree: DraftTree, verifier: str) -> None:
    """A step's expected yield is a Python number in [1, depth + 1] (at least the bonus or residual token, at most a
    whole path)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise VerifierContractError(f"verifier {verifier!r}: expected_yield returned {value!r:.60} "
                                    f"({type(value).__name__}); it must return a Python float, the exact expected "
                                    "number of emitted tokens (use float(...) on a tensor)")
    if not 1.0 - 1e-9 <= value <= tree.depth + 1.0 + 1e-9:
        raise VerifierContractError(f"verifier {verifier!r}: expected_yield returned {value!r} on a tree of depth "
                                    f"{tree.depth}; it must be the exact expected number of emitted tokens, in "
                                    f"[1, {tree.depth + 1}]")


def check_laws(q: torch.Tensor, tree: DraftTree) -> None:
    """Every law a verifier is handed (the target's `q` at the tree's nodes, the draft's at its expanded nodes) is a
    distribution.

    A NaN law cannot be sampled honestly (Gumbel-top-k would still return tokens), so the step is refused; the engine
    checks it in the bookkeeping after the step, not inside it, so the step keeps its host reads.
    """
    laws = [q, *tree.draft_probs.values()]
    if bool(torch.stack([torch.isnan(law).any() for law in laws]).any()):  # one host read, however many laws
        raise ValueError("a model's logits gave no distribution (NaN after softmax): the model returned NaN, or every "
                         "token of a row was masked to -inf; check the model's dtype and weights, the sampling "
                         "settings and, for the acceptance dial, model_pair.mix")
