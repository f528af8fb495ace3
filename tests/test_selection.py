"""Shape selection on a tuning split (rsd.selection): disjoint prompts, the best tuned shape runs, labelled as such."""

import json

import pytest

import rsd.runner
from helpers import compose_cfg
from rsd.errors import ConfigError
from rsd.runner import run
from rsd.selection import rank_shapes, split_tuning


def test_split_is_disjoint_and_refuses_overlap():
    ev, tune = split_tuning(list(range(10)), 6, 4)
    assert ev == [0, 1, 2, 3, 4, 5] and tune == [6, 7, 8, 9]
    with pytest.raises(ConfigError, match="need 11 distinct prompts"):
        split_tuning(list(range(10)), 7, 4)


def test_ranking_uses_the_expected_block_efficiency():
    runs = [{"shape_tag": "a", "block_efficiency": 2.0, "expected_block_efficiency": 1.5},
            {"shape_tag": "b", "block_efficiency": 1.8, "expected_block_efficiency": 1.7}]
    assert [s["shape_tag"] for s in rank_shapes(runs)] == ["b", "a"]


def test_only_the_shape_ranked_best_on_tuning_prompts_runs_on_the_evaluation_prompts(tmp_path, monkeypatch):
    cfg = compose_cfg("model_pair=tiny_llama", f"out_dir={tmp_path}", "sampling.max_new_tokens=6",
                      "dataset.num_prompts=3", "drafter=spectr", "budget=fixed_compute", "budget.target_tokens=4",
                      "budget.select={prompts:2,top:1}")
    [summary] = run(cfg)
    tuned = [json.loads(p.read_text()) for p in (tmp_path / "tuning").rglob("summary.json")]
    tune_ids = ["dolly-47", "dolly-48"]
    assert len(tuned) == 3 and all(s["selection"] == {"role": "tune", "prompts": tune_ids} for s in tuned)
    assert all(s["prompt_ids"] == ["dolly-47", "dolly-48"] for s in tuned)
    best = rank_shapes(tuned)[0]
    assert summary["shape_tag"] == best["shape_tag"]
    assert summary["prompt_ids"] == ["dolly-01", "dolly-02", "dolly-03"]
    assert summary["selection"]["role"] == "eval" and summary["selection"]["candidates"] == 3
    assert summary["selection"]["prompts"] == ["dolly-47", "dolly-48"] and summary["selection"]["rank"] == 1

    def no_load(*args, **kwargs):
        raise AssertionError("a finished selection must not load any model")

    monkeypatch.setattr(rsd.runner, "load_pair", no_load)
    monkeypatch.setattr(rsd.runner, "load_pair_tokenizer", no_load)
    [again] = run(cfg)
    assert again["run_dir"] == summary["run_dir"]
