"""Budgets: fixed draft length L, or fixed target compute B (drafted tokens the target verifies per call).

Each drafter class maps a budget to the exact list of tree shapes meeting it (`Drafter.shapes`); a run may pin one
shape with `budget.shape={...}` (a partial match on the shape's parameters).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rsd.errors import ConfigError


class InfeasibleBudgetError(ConfigError):
    """No tree shape of this drafter meets the budget (the message lists the shapes that would)."""


class TooManyRunsError(ConfigError):
    """A budget asks for more runs (tree shapes) than `budget.max_runs`; the message says how to narrow them."""


# `budget.max_runs` when a budget config does not set it: one run per shape, and RSD-C at a fixed compute B has
# hundreds of shapes at B = 30 (32,510 at B = 100), each a full run over the dataset.
DEFAULT_MAX_RUNS = 64
# Above this many branching vectors (e.g. B = 1000: about 8.5e9) they are counted, never listed.
MAX_ENUMERATED_SHAPES = 100_000
# The most tokens one step may draft (2**20): more than any model's context holds, so a larger tree can never run and
# is refused before it is built (an RSD-C shape at a fixed draft length L is a list of L branching factors).
MAX_TREE_TOKENS = 2**20


def _positive_int_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)


@dataclass(frozen=True)
class Budget:
    """`kind` is 'fixed_length' (uses draft_length) or 'fixed_compute' (uses target_tokens).

    `max_depth` drops deeper shapes; `max_runs` (None: no cap) refuses a plan of more shapes than that.
    """

    kind: str
    draft_length: int | None = None
    target_tokens: int | None = None
    max_depth: int | None = None
    max_runs: int | None = None

    def __post_init__(self) -> None:
        if self.kind == "fixed_length":
            if not _positive_int_or_none(self.draft_length) or self.draft_length is None:
                raise InfeasibleBudgetError(f"budget.draft_length={self.draft_length!r} must be a positive integer (L, "
                                            "the tokens drafted per step)")
            if self.draft_length > MAX_TREE_TOKENS:
                raise InfeasibleBudgetError(f"budget.draft_length={self.draft_length} is above {MAX_TREE_TOKENS:,} "
                                            "drafted tokens per step, more than any model's context holds; lower it")
        elif self.kind == "fixed_compute":
            if not _positive_int_or_none(self.target_tokens) or self.target_tokens is None:
                raise InfeasibleBudgetError(f"budget.target_tokens={self.target_tokens!r} must be a positive integer "
                                            "(B, the drafted tokens the target verifies per call)")
        else:
            raise InfeasibleBudgetError(f"unknown budget kind {self.kind!r}; use fixed_length or fixed_compute")
        if not _positive_int_or_none(self.max_depth):
            raise InfeasibleBudgetError(
                f"budget.max_depth={self.max_depth!r} is not a valid depth limit: it drops shapes deeper than this "
                "many levels, so it must be a positive integer (or null for no depth limit)")
        if not _positive_int_or_none(self.max_runs):
            raise InfeasibleBudgetError(f"budget.max_runs={self.max_runs!r} must be a positive integer (the most runs "
                                        "one config may plan) or null for no cap")

    @property
    def value(self) -> int:
        """The budget's number: L at fixed_length, B at fixed_compute."""
        return self.draft_length if self.kind == "fixed_length" else self.target_tokens

    @property
    def tag(self) -> str:
        return f"L{self.value}" if self.kind == "fixed_length" else f"B{self.value}"


@functools.lru_cache(maxsize=4096)  # the enumeration asks for the same small numbers' divisors many times
def divisors(n: int) -> tuple[int, ...]:
    """The divisors of n >= 1, ascending, from its prime factors (trial division up to sqrt(n), never a scan to n)."""
    factors: dict[int, int] = {}
    rest, p = n, 2
    while p * p <= rest:
        while rest % p == 0:
            factors[p] = factors.get(p, 0) + 1
            rest //= p
        p += 1 if p == 2 else 2
    if rest > 1:
        factors[rest] = factors.get(rest, 0) + 1
    out = [1]
    for prime, power in factors.items():
        out = [d * prime**i for d in out for i in range(power + 1)]
    return tuple(sorted(out))


def factor_pairs(n: int) -> list[tuple[int, int]]:
    """All (a, b) with a * b == n, a ascending."""
    return [(a, n // a) for a in divisors(n)]


def _divisors_up_to(total: int) -> dict[int, list[int]]:
    divisors: dict[int, list[int]] = {n: [] for n in range(1, total + 1)}
    for a in range(1, total + 1):
        for n in range(a, total + 1, a):
            divisors[n].append(a)
    return divisors


def _count_by_table(total: int, max_depth: int | None) -> list[int]:
    """[count of vectors of depth <= d for d = 1..max_depth] (the last entry alone when max_depth is None), bottom-up
    over every (what is left r, last level width w): fast for totals up to TABLE_COUNT_LIMIT.

    Level sizes n_1 | n_2 | ... sum to `total`, so a level after one of width w is a multiple m of w that divides
    what is left r (the levels after it are multiples of m too): ways(r, w) = sum over such m of
    [m == r] + ways(r - m, m).
    """
    divisors = _divisors_up_to(total)
    states = [(r, w) for r in range(1, total + 1) for w in divisors[r]]
    if max_depth is None:
        ways: dict[tuple[int, int], int] = {}
        for r, w in states:  # r ascending: every ways(r - m, m) needed is already known
            ways[r, w] = sum(1 if m == r else ways[r - m, m] for m in divisors[r] if m % w == 0)
        return [ways[total, 1]]
    layer: dict[tuple[int, int], int] = {}  # ways with at most d more levels
    counts = []
    for _ in range(max_depth):
        layer = {(r, w): sum(1 if m == r else layer.get((r - m, m), 0) for m in divisors[r] if m % w == 0)
                 for r, w in states}
        counts.append(layer[total, 1])
    return counts


def _count_by_depth_recursion(total: int, max_depth: int) -> list[int]:
    """counts_by_depth for any total, at small depths: the vectors after a first level b are those of
    total / b - 1 in units of b (an empty rest when b = total), so count(s, d) = 1 + sum over divisors e >= 2 of s of
    count(e - 1, d - 1); only the divisors' chains are visited, never every number up to `total`."""
    memo: dict[tuple[int, int], int] = {}

    def count(s: int, depth: int) -> int:
        if depth == 1:
            return 1
        if (s, depth) not in memo:
            memo[s, depth] = 1 + sum(count(e - 1, depth - 1) for e in divisors(s) if e > 1)
        return memo[s, depth]

    return [count(total, d) for d in range(1, max_depth + 1)]


# Totals up to this are counted exactly at any depth by the table (B = 1000: 25 ms); above it, by the depth recursion.
TABLE_COUNT_LIMIT = 1000


def count_branching_vectors(total: int, max_depth: int | None = None) -> int:
    """How many vectors `branching_vectors(total, max_depth)` yields, without listing them (fast for totals up to
    TABLE_COUNT_LIMIT or small depths; `branching_count_at_least` bounds huge budgets in milliseconds)."""
    if max_depth is not None and max_depth < total:
        return counts_by_depth(total, max_depth)[-1]
    return _count_by_table(total, None)[-1]


def counts_by_depth(total: int, max_depth: int) -> list[int]:
    """[count_branching_vectors(total, d) for d = 1..max_depth]."""
    if total <= TABLE_COUNT_LIMIT:
        return _count_by_table(total, max_depth)
    return _count_by_depth_recursion(total, max_depth)


def branching_count_at_least(total: int, max_depth: int | None, limit: int) -> tuple[int, bool]:
    """(n, exact): the number of branching vectors if `exact`, else a lower bound n > `limit`, found in
    milliseconds whatever the total. The count grows with the total (the vectors of total - 1 with a first level 1
    prepended are among those of total) and with the depth, so smaller totals and depths bound it from below."""
    depth = None if max_depth is None or max_depth >= total else max_depth
    if total <= TABLE_COUNT_LIMIT:
        return count_branching_vectors(total, depth), True
    if depth is None:  # every vector of TABLE_COUNT_LIMIT is (after a chain of 1s) one of `total`
        bound = count_branching_vectors(TABLE_COUNT_LIMIT)
        if bound > limit:
            return bound, False
        depth = total
    n = 0
    for d in range(1, depth + 1):  # one more level per pass, stopped as soon as the count exceeds the limit
        n = _count_by_depth_recursion(total, d)[-1]
        if n > limit:
            return n, d == depth
    return n, True


def branching_vectors(total: int, max_depth: int | None = None) -> Iterator[list[int]]:
    """Every branching vector (b_1..b_L), L <= max_depth, whose level sizes prod_{j<=l} b_j sum to `total`.

    Yielded in lexicographic order, iteratively (a recursion exceeds Python's limit near total = 1000). Raises
    TooManyRunsError, before listing any, when there are more than MAX_ENUMERATED_SHAPES of them.
    """
    count, exact = branching_count_at_least(total, max_depth, MAX_ENUMERATED_SHAPES)
    if count > MAX_ENUMERATED_SHAPES:
        by_depth = ", ".join(f"<= {d}: {n:,}" for d, n in enumerate(counts_by_depth(total, 4), 1))
        raise TooManyRunsError(
            f"budget.target_tokens={total} has {'' if exact else 'more than '}{count:,} RSD-C branching vectors "
            "(tree shapes)" + (f" of depth <= {max_depth}" if max_depth else "")
            + f", too many to plan: set budget.max_depth ({by_depth} shapes), pin one with "
            "budget.shape='{branching:[...]}', and raise budget.max_runs if you need more runs")
    # Depth-first over (prefix, what is left, width of the last level); children are pushed largest b first, so
    # the smallest is expanded next (lexicographic order). A level width * b must divide what is left (see above).
    stack: list[tuple[list[int], int, int]] = [([], total, 1)]
    while stack:
        prefix, remaining, width = stack.pop()
        if remaining == 0:
            yield prefix
        elif max_depth is None or len(prefix) < max_depth:
            stack.extend(([*prefix, b], remaining - width * b, width * b)
                         for b in reversed(divisors(remaining // width)))


def select_shapes(name: str, shapes: list[dict], budget: Budget, pin: Mapping[str, Any] | None) -> list[dict]:
    """Apply the depth limit and a pinned (partial) shape; raise with the feasible shapes if nothing is left, and
    with how to narrow them if more than `budget.max_runs` are left."""
    feasible = [s for s in shapes if budget.max_depth is None or shape_depth(s) <= budget.max_depth]
    chosen = [s for s in feasible if all(_same(s.get(k), v) for k, v in (pin or {}).items())]
    if not chosen:
        listing = ", ".join(shape_tag(s) for s in feasible[:40]) + (" ..." if len(feasible) > 40 else "")
        raise InfeasibleBudgetError(
            f"drafter {name!r} has no shape meeting budget {budget.tag}"
            + (f" with budget.shape={override_value(pin)}" if pin else "")
            + (f" and max_depth={budget.max_depth}" if budget.max_depth else "")
            + (f"; shapes that fit: {listing}" if feasible else "; no shape fits this budget at all")
            + ("; at a fixed draft length the shape comes from the drafter's keys (e.g. drafter.num_sequences=2), "
               "budget.shape pins one of the shapes of budget=fixed_compute" if pin and budget.kind == "fixed_length"
               else ""))
    if budget.max_runs is not None and len(chosen) > budget.max_runs:
        depths = sorted({shape_depth(s) for s in chosen})[:4]
        by_depth = ", ".join(f"<= {d}: {sum(shape_depth(s) <= d for s in chosen)}" for d in depths)
        example = min(chosen, key=shape_depth)
        raise TooManyRunsError(
            f"drafter {name!r} has {len(chosen):,} shapes meeting budget {budget.tag}"
            + (f" with max_depth={budget.max_depth}" if budget.max_depth else "")
            + f", one run each: more than budget.max_runs={budget.max_runs}; narrow them with budget.max_depth "
            f"({by_depth} shapes) or pin one with budget.shape='{override_value(example)}', or raise "
            f"budget.max_runs={len(chosen)}")
    return chosen


def override_value(value: Any) -> str:
    """A shape (or any value) written as a Hydra override value: {branching:[2,2,1]}."""
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{override_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(override_value(v) for v in value) + "]"
    return str(value)


def shape_depth(shape: Mapping[str, Any]) -> int:
    """The number of tree levels a shape drafts."""
    return len(shape["branching"]) if "branching" in shape else int(shape.get("draft_length", 0))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return a is not None and b is not None and list(a) == list(b)
    return a == b


def shape_tag(shape: Mapping[str, Any]) -> str:
    """A short readable name for a shape: 'L4', 'K3xL4', 'W3xL4', 'k3xL4xN12xTd1.0', 'b3-1-1-1', 'none'."""
    if "branching" in shape:
        return "b" + "-".join(str(b) for b in shape["branching"])
    named = (("num_sequences", "K"), ("beam_width", "W"), ("top_k", "k"), ("draft_length", "L"), ("tree_size", "N"),
             ("draft_temperature", "Td"))
    parts = [f"{prefix}{shape[key]}" for key, prefix in named if key in shape]
    extra = [f"{k}{v}" for k, v in sorted(shape.items()) if k not in dict(named)]
    return "x".join(parts + extra) or "none"
