"""Drafters: each builds a DraftTree and names the node rule (or tree-level verifier) that verifies it."""

from rsd.drafters.base import Drafter
from rsd.drafters.chain import AR, SD
from rsd.drafters.dynamic import Eagle2
from rsd.drafters.iid import SpecInfer, SpecTr
from rsd.drafters.lookup import PLD
from rsd.drafters.recursive import RSDC, RSDS
from rsd.drafters.verified import BV, TV

__all__ = ["AR", "BV", "RSDC", "RSDS", "SD", "TV", "Drafter", "Eagle2", "PLD", "SpecInfer", "SpecTr"]
