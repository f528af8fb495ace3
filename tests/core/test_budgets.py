"""Shape counts come before shape lists: divisors and branching-vector counts without scanning up to the budget."""

import time

import pytest

from rsd.core.budgets import (
    MAX_ENUMERATED_SHAPES,
    TABLE_COUNT_LIMIT,
    TooManyRunsError,
    _count_by_depth_recursion,
    _count_by_table,
    branching_count_at_least,
    branching_vectors,
    divisors,
    factor_pairs,
)


@pytest.mark.parametrize("n", [1, 2, 12, 97, 360, 1001])
def test_divisors_are_the_definition(n):
    assert list(divisors(n)) == [a for a in range(1, n + 1) if n % a == 0]
    assert factor_pairs(n) == [(a, n // a) for a in range(1, n + 1) if n % a == 0]


@pytest.mark.parametrize("total", [1, 7, 24, 60, 97])
def test_depth_recursion_counts_what_the_table_counts(total):
    assert _count_by_depth_recursion(total, 5) == _count_by_table(total, 5)


@pytest.mark.parametrize("total,depth", [(10**8, None), (10**12, None), (999_999_999_989, None), (10**8, 6)])
def test_huge_budgets_are_refused_by_their_count_in_milliseconds(total, depth):
    start = time.perf_counter()
    count, exact = branching_count_at_least(total, depth, MAX_ENUMERATED_SHAPES)
    assert count > MAX_ENUMERATED_SHAPES
    with pytest.raises(TooManyRunsError, match=f"{'' if exact else 'more than '}{count:,} RSD-C"):
        next(branching_vectors(total, depth))
    assert factor_pairs(total)[-1] == (total, 1)
    assert time.perf_counter() - start < 2  # about 0.1 s; the old table took 8.7 GB at 10**8, factor_pairs hung


def test_the_unlimited_bound_is_the_count_at_the_table_limit():
    """Above TABLE_COUNT_LIMIT the bound is the exact count of TABLE_COUNT_LIMIT, which grows with the total."""
    at_limit = _count_by_table(TABLE_COUNT_LIMIT, None)[-1]
    assert branching_count_at_least(TABLE_COUNT_LIMIT + 1, None, MAX_ENUMERATED_SHAPES) == (at_limit, False)
    assert branching_count_at_least(TABLE_COUNT_LIMIT, None, MAX_ENUMERATED_SHAPES) == (at_limit, True)


def test_a_huge_budget_at_depth_one_lists_its_one_shape():
    assert list(branching_vectors(10**12, 1)) == [[10**12]]
    assert list(branching_vectors(10**8, 2))[:3] == [[1, 99_999_999], [2, 49_999_999], [4, 24_999_999]]
