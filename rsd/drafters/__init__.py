"""Drafters: each builds a DraftTree and names the node rule that verifies it."""

from rsd.drafters.base import Drafter
from rsd.drafters.chain import AR, SD
from rsd.drafters.iid import SpecInfer, SpecTr
from rsd.drafters.recursive import RSDC, RSDS

__all__ = ["AR", "RSDC", "RSDS", "SD", "Drafter", "SpecInfer", "SpecTr"]
