"""Shape selection on a tuning split (harness.selection): disjoint prompts, the best tuned shape runs, labelled."""

import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest

import rsd.harness.runner
from helpers.config import compose_cfg, run_cfg
from rsd.data import load_builtin
from rsd.errors import ConfigError
from rsd.harness.runner import run
from rsd.harness.selection import SELECTED_BY, prompt_mean_score, rank_shapes, split_tuning
from rsd.harness.store import scan_records


def test_split_is_disjoint_and_refuses_overlap():
    ev, tune = split_tuning(list(range(10)), 6, 4)
    assert ev == [0, 1, 2, 3, 4, 5] and tune == [6, 7, 8, 9]
    with pytest.raises(ConfigError, match="need 11 distinct prompts"):
        split_tuning(list(range(10)), 7, 4)


def test_ranking_uses_the_expected_block_efficiency():
    runs = [{"shape_tag": "a", "block_efficiency": 2.0, "expected_block_efficiency": 1.5},
            {"shape_tag": "b", "block_efficiency": 1.8, "expected_block_efficiency": 1.7}]
    assert [s["shape_tag"] for s in rank_shapes(runs)] == ["b", "a"]


def test_ranking_by_prompt_mean_uses_the_given_scores():
    runs = [{"shape_tag": "a", "block_efficiency": 2.0, "expected_block_efficiency": 1.7},
            {"shape_tag": "b", "block_efficiency": 1.8, "expected_block_efficiency": 1.5}]
    assert [s["shape_tag"] for s in rank_shapes(runs, {"a": 1.4, "b": 1.6})] == ["b", "a"]
    records = [{"expected_emitted": [2.0, 1.0], "new_tokens": 3, "target_calls": 2},
               {"new_tokens": 1, "target_calls": 1}]  # no expectations: measured tokens
    assert prompt_mean_score(records) == pytest.approx((1.5 + 1.0) / 2)


def test_only_the_shape_ranked_best_on_tuning_prompts_runs_on_the_evaluation_prompts(tmp_path, monkeypatch):
    cfg = run_cfg("model_pair=tiny_llama", f"out_dir={tmp_path}", "sampling.max_new_tokens=6",
                  "dataset.num_prompts=3", "drafter=spectr", "budget=fixed_compute", "budget.target_tokens=4",
                  "budget.select={prompts:2,top:1}")
    [summary] = run(cfg)
    tuned = [json.loads(p.read_text()) for p in (tmp_path / "tuning").rglob("summary.json")]
    tune_ids = [ex.id for ex in load_builtin("dolly_builtin")[-2:]]
    assert len(tuned) == 3 and all(s["selection"] == {"role": "tune", "prompts": tune_ids} for s in tuned)
    assert all(s["prompt_ids"] == tune_ids for s in tuned)
    scores = {s["shape_tag"]: prompt_mean_score(scan_records(Path(s["run_dir"]) / "records.jsonl")[0]) for s in tuned}
    best = rank_shapes(tuned, scores)[0]  # the default ranking: the mean over tuning prompts (budget.select.by)
    assert summary["shape_tag"] == best["shape_tag"]
    assert summary["selection"]["selected_by"] == SELECTED_BY["prompt_mean"]
    assert summary["prompt_ids"] == ["dolly-01", "dolly-02", "dolly-03"]
    assert summary["selection"]["role"] == "eval" and summary["selection"]["candidates"] == 3
    assert summary["selection"]["prompts"] == tune_ids and summary["selection"]["rank"] == 1

    def no_load(*args, **kwargs):
        raise AssertionError("a finished selection must not load any model")

    monkeypatch.setattr(rsd.harness.runner, "load_pair", no_load)
    monkeypatch.setattr(rsd.harness.runner, "load_pair_tokenizer", no_load)
    [again] = run(cfg)
    assert again["run_dir"] == summary["run_dir"]


def test_a_tuning_run_held_by_another_process_is_waited_for(tmp_path):
    """Two workers on one selection job: the one that finds a tuning run busy waits for it, then still runs the
    evaluation (giving up would leave the job without its evaluation run when both workers give up)."""
    from rsd.data import load_examples
    from rsd.harness.files import RunLock
    from rsd.harness.runs import plan_runs, run_inputs

    cfg = run_cfg("model_pair=tiny_llama", f"out_dir={tmp_path}", "sampling.max_new_tokens=6",
                  "dataset.num_prompts=2", "drafter=spectr", "budget=fixed_compute", "budget.target_tokens=4",
                  "budget.select={prompts:2,top:1}")
    _, tuning = split_tuning(load_examples(replace(cfg.dataset, num_prompts=None)), 2, 2)
    busy = plan_runs(cfg.for_tuning(), run_inputs(cfg.for_tuning(), tuning))[0].run_dir
    lock = RunLock(busy).__enter__()
    assert lock.held
    threading.Timer(2.0, lock.__exit__).start()  # the "other worker" lets go without finishing the run
    [summary] = run(cfg)
    assert summary["selection"]["role"] == "eval" and summary["selection"]["candidates"] == 3
    assert (busy / "summary.json").exists()


def test_an_offset_takes_the_tuning_prompts_from_that_index_and_refuses_overlap():
    ev, tune = split_tuning(list(range(10)), 4, 2, offset=5)
    assert ev == [0, 1, 2, 3] and tune == [5, 6]
    assert split_tuning(list(range(10)), None, 2, offset=5) == ([0, 1, 2, 3, 4], [5, 6])
    for num_eval, offset in ((6, 5), (4, 9)):  # overlapping the evaluation prompts; past the dataset's end
        with pytest.raises(ConfigError, match="budget.select.offset"):
            split_tuning(list(range(10)), num_eval, 2, offset=offset)


@pytest.mark.parametrize("select, key", [("{prompts:2,offset:-1}", "offset"), ("{prompts:2,offset:1.5}", "offset"),
                                         ("{prompts:2,new_tokens:0}", "new_tokens"),
                                         ("{prompts:2,new_tokens:true}", "new_tokens")])
def test_bad_selection_options_are_one_line_errors(select, key):
    from rsd.harness.config import resolve_config

    cfg = compose_cfg("model_pair=tiny_llama", "drafter=spectr", "budget=fixed_compute", "budget.target_tokens=4",
                      f"budget.select={select}")
    with pytest.raises(ConfigError, match=f"budget.select.{key} must be"):
        resolve_config(cfg)


def test_tuning_runs_decode_new_tokens_on_the_prompts_at_offset(tmp_path):
    cfg = run_cfg("model_pair=tiny_llama", f"out_dir={tmp_path}", "sampling.max_new_tokens=6",
                  "dataset.num_prompts=2", "drafter=spectr", "budget=fixed_compute", "budget.target_tokens=4",
                  "budget.select={prompts:2,top:1,offset:10,new_tokens:3}")
    [summary] = run(cfg)
    tuned = [json.loads(p.read_text()) for p in (tmp_path / "tuning").rglob("summary.json")]
    assert len(tuned) == 3 and all(s["prompt_ids"] == ["dolly-11", "dolly-12"] for s in tuned)
    assert all(s["sampling"]["max_new_tokens"] == 3 for s in tuned)
    lengths = [json.loads(line)["new_tokens"] for p in (tmp_path / "tuning").rglob("records.jsonl")
               for line in p.read_text().splitlines()]
    assert max(lengths) == 3 and len(lengths) == 6
    assert summary["sampling"]["max_new_tokens"] == 6 and summary["prompt_ids"] == ["dolly-01", "dolly-02"]
    assert summary["selection"]["prompts"] == ["dolly-11", "dolly-12"]


def test_the_offset_is_not_part_of_an_evaluation_runs_identity(tmp_path):
    """A preset that pins where its tuning prompts sit (so a grown dataset keeps them) keeps its runs' directories."""
    from rsd.harness.runs import plan_runs

    base = ("model_pair=tiny_llama", f"out_dir={tmp_path}", "drafter=spectr", "budget=fixed_compute",
            "budget.target_tokens=4")
    dirs = [[p.run_dir for p in plan_runs(run_cfg(*base, f"budget.select={sel}"))]
            for sel in ("{prompts:4,top:1}", "{prompts:4,top:1,offset:44}")]
    assert dirs[0] == dirs[1]
