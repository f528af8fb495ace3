"""Type predicates for values read from YAML or JSON, where a bool is an int to Python but never a count to us."""

from __future__ import annotations

import math
from typing import Any


def is_int(value: Any, least: int | None = None) -> bool:
    """True for an int that is not a bool (and is >= `least` when given)."""
    return isinstance(value, int) and not isinstance(value, bool) and (least is None or value >= least)


def is_number(value: Any, finite: bool = False) -> bool:
    """True for an int or float that is not a bool (and is finite when `finite`)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and (not finite or math.isfinite(value))
