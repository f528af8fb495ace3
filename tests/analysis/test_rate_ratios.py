"""analysis/rates.py: per-prompt ratios to the AR run of the same prompt, a geometric mean per prompt set and
temperature (sets are never pooled), and the step costs that explain them."""

import math
from pathlib import Path

import pandas as pd
import pytest

from analysis import rates as rate_ratios


def test_ratios_pair_each_prompt_with_the_ar_run_of_its_own_set_and_keep_sets_apart():
    rows = []
    for dataset, ar_rate, ratios in (("a", 10.0, (0.5, 2.0, 1.0)), ("b", 40.0, (2.0, 2.0, 2.0))):
        for i, sd_ratio in enumerate(ratios):
            rows.append({"dataset": dataset, "prompt_id": f"p{i}", "method": "ar", "x": math.nan,
                         "decode_token_rate": ar_rate, "prompt_set": "3"})
            rows.append({"dataset": dataset, "prompt_id": f"p{i}", "method": "sd", "x": 2,
                         "decode_token_rate": ar_rate * sd_ratio, "prompt_set": "3"})
    table = rate_ratios.rate_ratios(pd.DataFrame(rows).assign(temperature=1.0))
    a, b = (row for _, row in table.iterrows())
    assert (a["dataset"], a["method"], a["x"], a["prompts"]) == ("a", "sd", 2, 3)
    assert a["ratio"] == pytest.approx(1.0)  # geometric mean of 0.5, 2, 1; the mean of raw ratios would be 1.17
    assert a["low"] < 1 < a["high"] and a["p"] == pytest.approx(1.0)
    assert b["ratio"] == pytest.approx(2.0) and b["prompts"] == 3  # not averaged with set a
    text = rate_ratios.markdown(table)
    assert "**a (3), T = 1**" in text and "**b (3), T = 1**" in text
    assert "| SD | 1.00 (" in text and "| SD | 2.00 (" in text


def run(dataset, method, x, tokens, calls, target, draft, other, verified):
    return {"temperature": 1.0, "dataset": dataset, "prompt_set": "8", "method": method, "x": x, "new_tokens": tokens,
            "target_calls": calls, "time_target_s": target, "time_draft_s": draft, "time_other_s": other,
            "tokens_verified_per_call": verified}


def test_step_costs_are_ratios_of_sums_in_ar_steps_of_the_same_set():
    """Set a: AR takes 0.6 s over 6 tokens (0.1 s a step); SD 20 tokens in 10 calls (two runs summed) taking 2 s
    (1.5 target, 0.3 draft, 0.2 other): block efficiency 2, a step costs 2 AR steps, of it 1.5 the target call,
    predicted ratio 1. Set b's AR is twice as slow, so the same SD times cost half as many of its AR steps."""
    runs = pd.DataFrame([run("a", "ar", math.nan, 6, 6, 0.5, 0.0, 0.1, 0.0),
                         run("b", "ar", math.nan, 6, 6, 1.0, 0.0, 0.2, 0.0),
                         run("a", "sd", 2, 12, 5, 0.8, 0.1, 0.1, 2.0), run("a", "sd", 2, 8, 5, 0.7, 0.2, 0.1, 1.0),
                         run("b", "sd", 2, 20, 10, 1.5, 0.3, 0.2, 2.0)])
    a, b = (row for _, row in rate_ratios.step_costs(runs).iterrows())
    assert (a["dataset"], a["method"], a["x"], b["dataset"]) == ("a", "sd", 2, "b")
    assert (a["block_efficiency"], a["step_cost"], a["target_cost"], a["draft_cost"], a["ratio"]) == pytest.approx(
        (2.0, 2.0, 1.5, 0.3, 1.0))
    assert a["tokens_verified_per_call"] == pytest.approx(1.5)
    assert (b["step_cost"], b["target_cost"], b["ratio"]) == pytest.approx((1.0, 0.75, 2.0))
    words = rate_ratios.costs_sentence(rate_ratios.step_costs(runs))
    assert "costs 0.75-1.50 AR steps, drafting adds 0.15-0.30" in words and "in 1 of 2 cells" in words


def test_the_readme_and_the_page_state_the_committed_token_rates():
    """The README's Results paragraph and the third edition's page say what the committed rates.csv and costs.csv say
    (lines joined: the README wraps its sentences)."""
    root = Path(__file__).resolve().parents[2]
    edition = root / "docs" / "results" / "embedded-eagle"
    if not (edition / "rates.csv").is_file():
        pytest.skip("the third study's token-rate pass is not committed yet")
    rates, costs = pd.read_csv(edition / "rates.csv"), pd.read_csv(edition / "costs.csv")
    for text in ((root / "README.md").read_text(), (edition / "README.md").read_text()):
        joined = text.replace("\n", " ")
        assert rate_ratios.sentence(rates) in joined and rate_ratios.costs_sentence(costs) in joined
