"""Budgets: fixed draft length L, or fixed target compute B (drafted tokens the target verifies per call).

Each drafter class maps a budget to the exact list of tree shapes meeting it (`Drafter.shapes`); a run may pin one
shape with `budget.shape={...}` (a partial match on the shape's parameters).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rsd.errors import ConfigError


class InfeasibleBudgetError(ConfigError):
    """No tree shape of this drafter meets the budget (the message lists the shapes that would)."""


@dataclass(frozen=True)
class Budget:
    """`kind` is 'fixed_length' (uses draft_length) or 'fixed_compute' (uses target_tokens)."""

    kind: str
    draft_length: int | None = None
    target_tokens: int | None = None
    max_depth: int | None = None

    def __post_init__(self) -> None:
        if self.kind == "fixed_length":
            if not isinstance(self.draft_length, int) or self.draft_length < 1:
                raise InfeasibleBudgetError(f"budget.draft_length must be a positive integer, got {self.draft_length}")
        elif self.kind == "fixed_compute":
            if not isinstance(self.target_tokens, int) or self.target_tokens < 1:
                raise InfeasibleBudgetError(
                    f"budget.target_tokens must be a positive integer, got {self.target_tokens}")
        else:
            raise InfeasibleBudgetError(f"unknown budget kind {self.kind!r}; use fixed_length or fixed_compute")

    @property
    def tag(self) -> str:
        return f"L{self.draft_length}" if self.kind == "fixed_length" else f"B{self.target_tokens}"

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "Budget":
        return cls(cfg["kind"], cfg.get("draft_length"), cfg.get("target_tokens"), cfg.get("max_depth"))


def factor_pairs(n: int) -> list[tuple[int, int]]:
    """All (a, b) with a * b == n, a ascending."""
    return [(a, n // a) for a in range(1, n + 1) if n % a == 0]


def branching_vectors(total: int) -> Iterator[list[int]]:
    """Every branching vector (b_1..b_L) whose level sizes prod_{j<=l} b_j sum to `total`."""

    def grow(remaining: int, width: int) -> Iterator[list[int]]:
        for b in range(1, remaining // width + 1):
            level = width * b
            if level == remaining:
                yield [b]
            else:
                for rest in grow(remaining - level, level):
                    yield [b, *rest]

    yield from grow(total, 1)


def select_shapes(name: str, shapes: list[dict], budget: Budget, pin: Mapping[str, Any] | None) -> list[dict]:
    """Apply the depth limit and a pinned (partial) shape; raise with the feasible shapes if nothing is left."""
    feasible = [s for s in shapes if budget.max_depth is None or shape_depth(s) <= budget.max_depth]
    chosen = [s for s in feasible if all(_same(s.get(k), v) for k, v in (pin or {}).items())]
    if not chosen:
        listing = ", ".join(shape_tag(s) for s in feasible[:40]) + (" ..." if len(feasible) > 40 else "")
        raise InfeasibleBudgetError(
            f"drafter {name!r} has no shape meeting budget {budget.tag}"
            + (f" with budget.shape={dict(pin)}" if pin else "")
            + (f" and max_depth={budget.max_depth}" if budget.max_depth else "")
            + (f"; shapes that fit: {listing}" if feasible else "; no shape fits this budget at all"))
    return chosen


def shape_depth(shape: Mapping[str, Any]) -> int:
    """The number of tree levels a shape drafts."""
    return len(shape["branching"]) if "branching" in shape else int(shape.get("draft_length", 0))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return a is not None and b is not None and list(a) == list(b)
    return a == b


def shape_tag(shape: Mapping[str, Any]) -> str:
    """A short readable name for a shape: 'L4', 'K3xL4', 'W3xL4', 'b3-1-1-1', 'none'."""
    if "branching" in shape:
        return "b" + "-".join(str(b) for b in shape["branching"])
    parts = [f"{prefix}{shape[key]}" for key, prefix in (("num_sequences", "K"), ("beam_width", "W"),
                                                          ("draft_length", "L")) if key in shape]
    extra = [f"{k}{v}" for k, v in sorted(shape.items())
             if k not in ("num_sequences", "beam_width", "draft_length")]
    return "x".join(parts + extra) or "none"
