"""Verifiers (docs/algorithms.md#verifiers): the node-rule walk, Block verification and Traversal verification."""

from rsd.verify.base import Coins, RandomCoins, Verifier, get_verifier, verifier_for

__all__ = ["Coins", "RandomCoins", "Verifier", "get_verifier", "verifier_for"]
