"""analysis/rates.py: per-prompt ratios to the AR run of the same setting, pooled as a geometric mean."""

import math

import pandas as pd
import pytest

from analysis import rates as rate_ratios


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


def test_step_costs_are_ratios_of_sums_in_ar_steps():
    """AR: 1 s over 10 tokens, so one AR step is 0.1 s. SD over two sets: 20 tokens in 10 calls taking 2 s (1.5 target,
    0.3 draft, 0.2 other): block efficiency 2, a step costs 2 AR steps, of it 1.5 the target call; predicted ratio 1."""
    def run(dataset, method, x, tokens, calls, target, draft, other, verified):
        return {"temperature": 1.0, "dataset": dataset, "method": method, "x": x, "new_tokens": tokens,
                "target_calls": calls, "time_target_s": target, "time_draft_s": draft, "time_other_s": other,
                "tokens_verified_per_call": verified}
    runs = pd.DataFrame([run("a", "ar", math.nan, 6, 6, 0.5, 0.0, 0.1, 0.0),
                         run("b", "ar", math.nan, 4, 4, 0.3, 0, 0.1, 0),
                         run("a", "sd", 2, 12, 5, 0.8, 0.1, 0.1, 2.0), run("b", "sd", 2, 8, 5, 0.7, 0.2, 0.1, 1.0)])
    [row] = rate_ratios.step_costs(runs).itertuples()
    assert (row.method, row.x) == ("sd", 2)
    assert (row.block_efficiency, row.step_cost, row.target_cost, row.draft_cost, row.ratio) == pytest.approx(
        (2.0, 2.0, 1.5, 0.3, 1.0))
    assert row.tokens_verified_per_call == pytest.approx(1.5)
    words = rate_ratios.costs_sentence(rate_ratios.step_costs(runs))
    assert "costs 1.50-1.50 AR steps, drafting adds 0.30-0.30" in words and "in 0 of 1 cells" in words
