"""The fixed-compute trend test: per-prompt slopes of a gap over B, tested across prompts (analysis/trend.py)."""

import numpy as np
import pandas as pd
import pytest

from analysis.stats import holm
from analysis.trend import trend_markdown, trend_rows, verdict

SETTING = {"model_pair": "m", "draft": "d", "mix": "", "dtype": "float32", "prompt_set": "p", "temperature": 1.0,
           "top_k": 0, "top_p": 1.0, "max_new_tokens": 32, "seed": 0}
BUDGETS = (6, 14, 30)


def frames(growth: float, datasets=("s",), prompts: int = 40, seed: int = 0):
    """RSD-S and SpecTr runs at each B; per prompt, RSD-S - SpecTr = its own offset + growth * B + noise."""
    rng = np.random.default_rng(seed)
    best, rows = [], []
    for dataset in datasets:
        offsets = rng.normal(0, 0.3, prompts)
        for x in BUDGETS:
            for method in ("rsd_s", "spectr"):
                run = f"{dataset}/{method}/B{x}"
                best.append({**SETTING, "dataset": dataset, "budget": "fixed_compute", "x": x, "method": method,
                             "run_dirs": [run]})
                gap = offsets + growth * x + rng.normal(0, 0.05, prompts) if method == "rsd_s" else 0.0
                rows += [{"run_dir": run, "dataset": dataset, "prompt_id": f"q{i}",
                          "expected_block_efficiency": 1.5 + (gap[i] if method == "rsd_s" else 0.0)}
                         for i in range(prompts)]
    return pd.DataFrame(best), pd.DataFrame(rows)


def test_a_growing_gap_is_detected_and_its_change_is_the_grid_span_times_the_slope():
    best, prompts = frames(growth=0.004, prompts=200)  # the change's SE is then about 0.005
    [row] = trend_rows(best, prompts, claims=[("rsd_s", "spectr")]).to_dict("records")
    assert row["change"] == pytest.approx(0.004 * 24, abs=0.02) and row["p_holm"] < 0.001
    assert verdict(pd.Series(row)) == "the gap grows with B" and row["points"] == "6,14,30"


def test_a_constant_gap_is_no_trend_although_prompts_differ_a_lot():
    """Prompt offsets (0.3) dwarf the noise (0.05): per-prompt slopes cancel them, so the CI is the noise's."""
    best, prompts = frames(growth=0.0, seed=3)
    [row] = trend_rows(best, prompts, claims=[("rsd_s", "spectr")]).to_dict("records")
    assert verdict(pd.Series(row)) == "no trend detected" and abs(row["change"]) < 0.05
    assert row["high"] - row["low"] < 0.06


def test_datasets_are_also_pooled_and_holm_runs_over_every_row():
    best, prompts = frames(growth=0.004, datasets=("a", "b"))
    frame = trend_rows(best, prompts, claims=[("rsd_s", "spectr")])
    assert list(frame["dataset"]) == ["a", "b", "a+b"] and list(frame["n"]) == [40, 40, 80]
    assert (frame["p_holm"] >= frame["p"]).all()
    assert "| a+b | 1.0 | RSD-S − SpecTr | 6..30 |" in trend_markdown(frame)


def test_without_pooling_every_row_is_one_set():
    """The third edition never averages across prompt sets: pool_sets=False keeps only the per-set rows, with Holm
    over them."""
    best, prompts = frames(growth=0.004, datasets=("a", "b"))
    frame = trend_rows(best, prompts, claims=[("rsd_s", "spectr")], pool_sets=False)
    assert list(frame["dataset"]) == ["a", "b"] and list(frame["n"]) == [40, 40]
    np.testing.assert_allclose(frame["p_holm"], holm(frame["p"]))
