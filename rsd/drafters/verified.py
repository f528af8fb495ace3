"""Drafters verified by a tree-level verifier (docs/algorithms.md#verifiers): the SD chain under Block verification
and the RSD-C tree under Traversal verification. Same trees, shapes and budgets as SD and RSD-C; only the verifier
differs."""

from __future__ import annotations

from rsd.drafters.chain import SD
from rsd.drafters.recursive import RSDC


class BV(SD):
    """Block verification (Sun et al. 2025) of the SD chain of length L."""

    name = "bv"
    verifier = "block"


class TV(RSDC):
    """Traversal verification (Weng et al. 2025) of the RSD-C tree (Gumbel-top-k children in draw order)."""

    name = "tv"
    verifier = "traversal"
