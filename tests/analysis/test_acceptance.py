"""Per-position acceptance (vLLM's num_accepted_tokens_per_pos / num_drafts), token-weighted and per request."""

import pandas as pd
import pytest

from analysis.acceptance import acceptance_markdown, acceptance_row, acceptance_summary
from rsd.core.engine import Engine
from rsd.core.sampling import SamplingParams, prompt_generator
from rsd.drafters import SD
from rsd.models.adapter import CausalLM
from rsd.models.tiny import tiny_pair


def record(accepted, verified, new_tokens=None):
    return {"accepted_lengths": accepted, "tokens_verified": verified, "target_calls": len(accepted),
            "new_tokens": new_tokens if new_tokens is not None else sum(a + 1 for a in accepted)}


def test_hand_computed_rates():
    # prompt a: drafts accept 2, 0, 3 and one step drafted nothing; prompt b: one draft accepting 1
    runs = [record([2, 0, 0, 3], [3, 3, 0, 3]), record([1], [3])]
    s = acceptance_summary(runs, positions=3)
    assert s["num_drafts"] == 4 and s["num_accepted_tokens_per_pos"] == [3, 2, 1]
    assert s["rate_token_weighted"] == [3 / 4, 2 / 4, 1 / 4]
    assert s["rate_per_request"] == pytest.approx([(2 / 3 + 1) / 2, (2 / 3 + 0) / 2, (1 / 3 + 0) / 2])
    assert s["conditional"] == pytest.approx([3 / 4, 2 / 3, 1 / 2])
    assert s["mean_acceptance_length"] == pytest.approx((9 + 2) / 5)
    assert s["mean_acceptance_length_per_request"] == pytest.approx((9 / 4 + 2) / 2)
    keys = {"dataset": "d", "temperature": 1.0, "budget": "fixed_length", "x": 3, "method": "sd", "shape_tag": "L3"}
    row = acceptance_row(keys, runs, depth=3)
    assert row["pos4_token_weighted"] is None and row["pos3_conditional"] == pytest.approx(1 / 2)
    table = acceptance_markdown(pd.DataFrame([row]))
    assert "| SD | L3 | 4 | 2.200 (2.125) | 0.750 (0.833) | 0.500 (0.333) | 0.250 (0.167) | – (–) | – (–) |" in table


def test_mean_acceptance_length_is_one_plus_the_position_rates_on_an_engine_run():
    """Without EOS every SD step emits its accepted tokens plus one: over the drafting steps, tokens per step is
    1 + sum_k rate_k (k <= L); a step that drafts nothing (the last token of a text) emits one."""
    target, draft = tiny_pair("llama", 64, seed=2, init_std=0.15)
    engine = Engine(CausalLM(target), CausalLM(draft), SD(3), SamplingParams(1.0), [], 64)
    runs = []
    for i in range(3):
        out = engine.generate([3, 4, 5], 25, prompt_generator(0, str(i)))
        runs.append({"accepted_lengths": out.accepted_lengths, "tokens_verified": out.tokens_verified,
                     "target_calls": out.target_calls, "new_tokens": len(out.new_token_ids)})
    s = acceptance_summary(runs, positions=3)
    calls = sum(r["target_calls"] for r in runs)
    undrafted = sum(1 for r in runs for n in r["tokens_verified"] if n == 0)
    assert s["num_drafts"] == calls - undrafted > 0
    emitted = s["num_drafts"] * (1 + sum(s["rate_token_weighted"])) + undrafted
    assert s["mean_acceptance_length"] == pytest.approx(emitted / calls)
    assert 0 < s["rate_token_weighted"][0] < 1
