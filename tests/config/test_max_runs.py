"""budget.max_runs caps a config's runs inclusively: exactly max_runs shapes run, one more is refused up front."""

from __future__ import annotations

import pytest

from helpers.config import run_cfg
from rsd.core.budgets import TooManyRunsError
from rsd.harness.runs import plan_runs

RSDC_B6 = ("drafter=rsd_c", "budget=fixed_compute", "budget.target_tokens=6")


def test_a_config_with_exactly_max_runs_shapes_plans_them_all() -> None:
    """RSD-C at B = 6 has 10 branching vectors: max_runs=10 plans all 10, max_runs=9 names the cap to raise."""
    shapes = [p.shape["branching"] for p in plan_runs(run_cfg(*RSDC_B6, "budget.max_runs=null"))]
    assert len(shapes) == len({tuple(s) for s in shapes}) == 10
    assert [p.shape["branching"] for p in plan_runs(run_cfg(*RSDC_B6, "budget.max_runs=10"))] == shapes
    with pytest.raises(TooManyRunsError, match=r"more than budget\.max_runs=9;.*raise budget\.max_runs=10"):
        plan_runs(run_cfg(*RSDC_B6, "budget.max_runs=9"))
