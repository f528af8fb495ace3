"""run.py end to end: records and summary files, per-prompt seeding, and early, clear errors."""

import json
import os

import pytest

import rsd.drafters
import rsd.harness.runner
from helpers.config import ROOT, compose_cfg, run_cfg
from rsd.core.budgets import InfeasibleBudgetError
from rsd.data import DatasetError
from rsd.errors import ConfigError
from rsd.harness.config import resolve_config
from rsd.harness.prompts import PromptTooLongError
from rsd.harness.runner import run
from rsd.harness.runs import plan_runs
from rsd.models.embedded import ModelUnavailableError
from rsd.models.pairs import TokenizerMismatchError, check_same_vocabulary

RECORD_KEYS = {"prompt_id", "new_token_ids", "text", "new_tokens", "target_calls", "draft_calls", "accepted_lengths",
               "wall_s", "tokens_verified", "time_draft_s", "time_target_s", "time_other_s"}
SUMMARY_KEYS = {"block_efficiency", "mbsu", "token_rate", "target_params", "draft_params", "config", "complete"}


def tiny_run(tmp_path, *overrides):
    cfg = run_cfg("model_pair=tiny_llama", f"out_dir={tmp_path}", "sampling.max_new_tokens=12",
                  "dataset.num_prompts=3", *overrides)
    return run(cfg)


def test_run_writes_records_and_summary(tmp_path):
    [summary] = tiny_run(tmp_path, "drafter=sd")
    run_dir = tmp_path / summary["run_dir"].split(str(tmp_path) + "/")[1]
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    assert len(records) == 3 and RECORD_KEYS <= set(records[0])
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(on_disk)
    assert on_disk["block_efficiency"] == pytest.approx(sum(r["new_tokens"] for r in records)
                                                        / sum(r["target_calls"] for r in records))
    assert on_disk["config"]["drafter"]["shape"] == {"draft_length": 4}
    assert json.loads((run_dir / "run.json").read_text())["environment"]["torch"]
    assert on_disk["draft_params"] > 0 and on_disk["target_params"] > on_disk["draft_params"]
    assert on_disk["elapsed_s"] >= on_disk["wall_s"] > 0  # the run's process time includes its timed decoding


def test_output_of_a_prompt_does_not_depend_on_the_prompts_before_it(tmp_path):
    prompts = [{"id": f"p{i}", "prompt": f"prompt number {i}"} for i in range(3)]
    forward, backward = tmp_path / "f.jsonl", tmp_path / "b.jsonl"
    forward.write_text("".join(json.dumps(p) + "\n" for p in prompts))
    backward.write_text("".join(json.dumps(p) + "\n" for p in prompts[::-1]))
    outputs = []
    for path, name in ((forward, "f"), (backward, "b")):
        [s] = tiny_run(tmp_path / name, "drafter=rsd_s", "dataset=local", f"dataset.path={path}")
        recs = [json.loads(x) for x in open(os.path.join(s["run_dir"], "records.jsonl"))]
        outputs.append({r["prompt_id"]: r["new_token_ids"] for r in recs})
    assert outputs[0] == outputs[1]


def test_unknown_drafter_class_is_a_config_error():
    with pytest.raises(ConfigError, match="cannot be imported"):
        plan_runs(run_cfg("drafter.name=mine", "drafter._target_=nowhere.Mine"))


def test_infeasible_shape_fails_before_models_load():
    with pytest.raises(InfeasibleBudgetError, match="shapes that fit: K1xL7, K7xL1"):
        plan_runs(run_cfg("drafter=spectr", "budget=fixed_compute", "budget.target_tokens=7",
                          "+budget.shape={num_sequences:3}"))


def test_bad_sampling_values_are_config_errors():
    with pytest.raises(ConfigError, match="top_p"):
        plan_runs(run_cfg("sampling.top_p=0"))


def test_prompt_longer_than_context_fails_before_weights_load(tmp_path, monkeypatch):
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"id": "long", "prompt": "x" * 2100}) + "\n")

    def no_weights(*_a, **_k):
        raise AssertionError("weights loaded before the context check")

    monkeypatch.setattr(rsd.harness.runner, "load_pair", no_weights)
    with pytest.raises(PromptTooLongError, match="prompt 'long' has 2101 tokens"):
        tiny_run(tmp_path, "dataset=local", f"dataset.path={path}", "dataset.num_prompts=1")
    assert not any(tmp_path.rglob("records.jsonl"))


def test_local_dataset_errors(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        tiny_run(tmp_path, "dataset=local", f"dataset.path={tmp_path}/missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"id": 3}\n')
    with pytest.raises(DatasetError, match="record 2 has no non-empty string field 'prompt'"):
        tiny_run(tmp_path, "dataset=local", f"dataset.path={bad}")
    with pytest.raises(DatasetError, match="dataset.path=FILE.jsonl"):
        tiny_run(tmp_path, "dataset=local")


def test_hub_dataset_offline_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(DatasetError, match="built-in set"):
        tiny_run(tmp_path, "dataset=xsum", "dataset.num_prompts=2")


def test_missing_hub_model_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelUnavailableError, match="hf download"):
        run(run_cfg(f"out_dir={tmp_path}", "model_pair.target=facebook/opt-125m",
                    "model_pair.draft=facebook/opt-125m"))


def test_mismatched_tokenizers():
    class Tok:
        def __init__(self, vocab):
            self.vocab = vocab

        def get_vocab(self):
            return self.vocab

    check_same_vocabulary(Tok({"a": 0, "b": 1}), Tok({"a": 0, "b": 1}), "t", "d")
    with pytest.raises(TokenizerMismatchError, match="different tokenizers"):
        check_same_vocabulary(Tok({"a": 0, "b": 1}), Tok({"a": 1, "b": 0}), "t", "d")


def test_cli_prints_table_and_errors_cleanly(tmp_path, run_py):
    """The table on success; a refused budget is a one-line RsdError raised before anything loads or is written,
    which run.py prints with exit status 2 (that path in a real process: test_cli_refusal_exits_2_with_one_line...)."""
    ok = run_py("model_pair=tiny_opt", f"out_dir={tmp_path}", "drafter=rsd_c", "dataset.num_prompts=2",
                "sampling.max_new_tokens=8")
    assert ok.returncode == 0, ok.stderr
    assert "method" in ok.stdout and "rsd_c" in ok.stdout and "MBSU" in ok.stdout
    assert "declares a sweep" not in ok.stderr
    with pytest.raises(InfeasibleBudgetError, match="^drafter 'rsd_s' has no shape meeting budget B5") as err:
        resolve_config(compose_cfg("model_pair=tiny_opt", f"out_dir={tmp_path / 'bad'}", "drafter=rsd_s",
                                   "budget=fixed_compute", "budget.target_tokens=5", "+budget.shape={beam_width:2}"))
    assert "\n" not in str(err.value) and not (tmp_path / "bad").exists()


def test_a_sweep_preset_without_multirun_says_so(tmp_path, run_py):
    """`python run.py experiment=quickstart` (no -m) runs one job: it must say that the preset is a sweep."""
    one = run_py("experiment=quickstart", "model_pair=tiny_opt", f"out_dir={tmp_path}", "dataset.num_prompts=1",
                 "sampling.max_new_tokens=4")
    assert one.returncode == 0, one.stderr
    assert "declares a sweep over" in one.stderr and "Add -m" in one.stderr



def test_run_directories_and_identities_equal_the_golden_fixture():
    """Refactors of the config resolution rename no run: directories and identities (key order too) as recorded."""
    import importlib.util

    golden = ROOT / "tests" / "golden"
    spec = importlib.util.spec_from_file_location("make_run_dirs", golden / "make_run_dirs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    want = json.loads((golden / "run_dirs.json").read_text())
    assert json.dumps(module.run_dirs()) == json.dumps(want)


class ExplodingDrafter(rsd.drafters.SD):
    """A user's drafter whose constructor fails with neither TypeError nor ValueError, over several lines."""

    def __init__(self, draft_length):
        raise RuntimeError("no GPU kernel for this shape\n  (details on a second line)")


class ExplodingShapes(rsd.drafters.SD):
    """A user's drafter whose `shapes` fails."""

    @classmethod
    def shapes(cls, budget, params):
        raise KeyError("depth")


@pytest.mark.parametrize("cls,words", [("ExplodingDrafter", "rejects shape {'draft_length': 4}: no GPU kernel"),
                                       ("ExplodingShapes", "could not list its shapes for budget L4: KeyError")])
def test_a_user_drafter_failing_anyhow_is_a_one_line_config_error(cls, words):
    with pytest.raises(ConfigError) as info:
        resolve_config(compose_cfg("drafter.name=mine", f"drafter._target_=test_runner.{cls}"))
    assert words in str(info.value) and "\n" not in str(info.value)


def test_runs_are_named_by_the_revision_that_loading_fetched(tmp_path, monkeypatch):
    """A hub model fetched by load_pair changes the model fingerprint: the job re-plans under the new identity,
    loads once and writes its runs there (and a rerun finds them complete without loading anything)."""
    real_inputs, real_load, fetched, loads = rsd.harness.runner.run_inputs, rsd.harness.runner.load_pair, [], []

    def inputs(rc, examples):
        found = real_inputs(rc, examples)
        return {**found, "model_files": {**found["model_files"], "hub_revision": "abc123" if fetched else None}}

    def load(*args, **kwargs):
        loads.append(1)
        fetched.append(1)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(rsd.harness.runner, "run_inputs", inputs)
    monkeypatch.setattr(rsd.harness.runner, "load_pair", load)
    [summary] = tiny_run(tmp_path, "drafter=sd")
    assert loads == [1]
    written = json.loads(open(os.path.join(summary["run_dir"], "summary.json")).read())
    assert written["config"]["inputs"]["model_files"]["hub_revision"] == "abc123"
    [again] = tiny_run(tmp_path, "drafter=sd")
    assert loads == [1] and again["run_dir"] == summary["run_dir"]
