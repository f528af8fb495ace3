"""experiments/rate_ratios.py: per-prompt ratios to the AR run of the same setting, pooled as a geometric mean."""

import importlib.util
import math

import pandas as pd
import pytest

from helpers.config import ROOT

spec = importlib.util.spec_from_file_location("rate_ratios", ROOT / "experiments" / "rate_ratios.py")
rate_ratios = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rate_ratios)


def test_ratios_pair_each_prompt_with_the_ar_run_of_its_own_set():
    rows = []
    for dataset, ar_rate in (("a", 10.0), ("b", 40.0)):  # the two sets' AR rates differ 4x
        for i, sd_ratio in enumerate((0.5, 2.0, 1.0)):
            rows.append({"dataset": dataset, "prompt_id": f"p{i}", "method": "ar", "x": math.nan,
                         "decode_token_rate": ar_rate})
            rows.append({"dataset": dataset, "prompt_id": f"p{i}", "method": "sd", "x": 2,
                         "decode_token_rate": ar_rate * sd_ratio})
    [row] = rate_ratios.rate_ratios(pd.DataFrame(rows)).itertuples()
    assert (row.method, row.x, row.prompts) == ("sd", 2, 6)
    assert row.ratio == pytest.approx(1.0)  # geometric mean of 0.5, 2, 1 twice; pooling raw rates would not give 1
    assert row.low < 1 < row.high and row.p == pytest.approx(1.0)
    assert "| SD | 1.00 (" in rate_ratios.markdown(pd.DataFrame([row._asdict()]).drop(columns="Index"))
