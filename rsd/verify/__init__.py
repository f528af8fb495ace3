"""Verifiers (docs/algorithms.md#verifiers): the node-rule walk, Block verification and Traversal verification."""

from rsd.verify.base import (
    Coins,
    RandomCoins,
    ReportsRootAcceptance,
    Verifier,
    get_verifier,
    root_acceptance,
    verifier_for,
)

__all__ = ["Coins", "RandomCoins", "ReportsRootAcceptance", "Verifier", "get_verifier", "root_acceptance",
           "verifier_for"]
