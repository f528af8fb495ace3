"""rsd.harness.records and rsd.harness.summary: the record and summary types, their versions, their one-line errors
(rsd.harness.fields), the layout the runner writes, and every committed study's records and summaries reading as
version 1."""

import json
import tarfile

import pytest

from helpers.config import ROOT, run_cfg
from helpers.runs import record, write_run
from rsd.core.metrics import summarize_records
from rsd.harness.fields import SCHEMA_VERSION, RecordError, SummaryError
from rsd.harness.records import Record
from rsd.harness.runner import run
from rsd.harness.store import summary_problem
from rsd.harness.summary import METRICS, Summary

# the keys the runner wrote before records had a version, in order (peak_gpu_memory_gb on CUDA only, after the
# decode rate; prompt_tokens_before_truncation for cut prompts only, last): version 2 adds schema_version after them
RECORD_LAYOUT = ["prompt_id", "prompt_tokens", "new_token_ids", "text", "new_tokens", "target_calls", "draft_calls",
                 "tokens_verified", "accepted_lengths", "block_efficiency", "wall_s", "time_draft_s", "time_target_s",
                 "time_other_s", "draft_length", "score", "ttft_s", "decode_s", "decode_tokens", "decode_token_rate",
                 "expected_emitted", "root_optimum", "root_acceptance"]
SUMMARY_LAYOUT = ["complete", "method", "shape", "shape_tag", "draft_length", "tree_size", "budget", "budget_value",
                  "model_pair", "dataset", "task", "sampling", "seed", "target_params", "draft_params", *METRICS,
                  "accuracy", "run_dir", "config", "prompt_ids", "records_sha256", "elapsed_s"]


def build_args(**change) -> dict:
    """Record.build's arguments for a version-2 record of three steps (accepted 2, 0, 1: 6 tokens), changed."""
    return {"prompt_id": "p0", "prompt_tokens": 5, "new_token_ids": [7] * 6, "text": "hi", "target_calls": 3,
            "draft_calls": 6, "tokens_verified": [4] * 3, "accepted_lengths": [2, 0, 1], "wall_s": 1.0,
            "time_draft_s": 0.25, "time_target_s": 0.5, "time_other_s": 0.25, "draft_length": 2, "score": None,
            "ttft_s": 0.5, "decode_s": 0.5, "decode_tokens": 3, "expected_emitted": [2.5, 1.0, 2.0],
            "root_optimum": [0.5, None, 1.0], "root_acceptance": [0.25, None, 0.5], **change}


def v2_record(**change) -> dict:
    """The stored form of `build_args()`, with `change` applied to it ("drop": the key left out)."""
    return {k: v for k, v in {**Record.build(**build_args()).to_json(), **change}.items() if v != "drop"}


def test_metrics_are_summarize_records_keys_in_order():
    assert tuple(summarize_records([record("p0", [1, 0], 1.0, 1.0, 2, 2)], 1, 10)) == METRICS


def test_a_version_2_record_round_trips_in_the_runners_layout():
    rec = v2_record()
    assert list(rec) == [*RECORD_LAYOUT, "schema_version"] and rec["schema_version"] == SCHEMA_VERSION == 2
    assert rec["new_tokens"] == 6 and rec["block_efficiency"] == 2.0 and rec["decode_token_rate"] == 6.0
    assert rec["score"] is None  # a null a version-2 record stores, not a key it leaves out
    assert json.dumps(Record.from_json(rec).to_json()) == json.dumps(rec)


def test_conditional_keys_are_written_only_where_they_apply():
    full = Record.build(**build_args(peak_gpu_memory_gb=1.5, prompt_tokens_before_truncation=40)).to_json()
    assert list(full) == [*RECORD_LAYOUT[:20], "peak_gpu_memory_gb", *RECORD_LAYOUT[20:],
                          "prompt_tokens_before_truncation", "schema_version"]
    assert Record.from_json(full).to_json() == full


def test_a_record_without_a_version_reads_as_version_1():
    old = record("p0", [2, 0, 1], 1.0, 50.0, 2, 2)
    assert "schema_version" not in old and Record.from_json(old).schema_version == 1
    assert Record.from_json(old).to_json() == old
    assert Record.from_json({**old, "decode_tokens": 3, "decode_s": 0.5}).decode_tokens == 3  # checked when present
    with pytest.raises(RecordError, match=r"^f:2: corrupt record \(expected_emitted must be a list of numbers, got "
                                          r"None\)$"):
        Record.from_json({**old, "expected_emitted": None}, "f:2")  # a null is not a key left out


@pytest.mark.parametrize("change, message", [
    ({"ttft_s": "drop"}, "not a record (missing ttft_s)"),
    ({"root_optimum": "drop", "text": "drop"}, "not a record (missing text, root_optimum)"),
    ({"ttft_s": -1.0}, "ttft_s must be a number >= 0, got -1.0"),
    ({"root_acceptance": [0.5, "x", None]}, "root_acceptance must be a list of numbers or nulls, got [0.5, 'x', None]"),
    ({"decode_token_rate": 5.0}, "decode_token_rate=5.0 is not decode_tokens / decode_s"),
    ({"schema_version": 3}, "schema_version must be one of 1, 2 (this rsd reads versions up to 2), got 3"),
])
def test_a_bad_stored_record_is_one_line_naming_the_file_the_key_and_what_it_must_be(change, message):
    with pytest.raises(RecordError) as err:
        Record.from_json(v2_record(**change), "run/records.jsonl:4")
    assert str(err.value) == f"run/records.jsonl:4: corrupt record ({message})" and err.value.problem == message


def test_a_record_the_engine_could_not_have_made_is_refused_when_built():
    with pytest.raises(RecordError, match=r"^accepted_lengths has 2 entries for target_calls=3 "):
        Record.build(**build_args(accepted_lengths=[2, 0]))
    with pytest.raises(RecordError, match=r"^ttft_s must be a number >= 0, got None$"):  # version 2 needs every key
        Record.build(**build_args(ttft_s=None))


def summary_of(tmp_path, **extra):
    run_dir = write_run(tmp_path, "sd", "sd", {"draft_length": 2}, "L2", "fixed_length", 2,
                        [record(f"p{i}", [2, 1], 1.0, 50.0, 2, 2) for i in range(2)], 50.0, extra=extra or None)
    return run_dir, json.loads((run_dir / "summary.json").read_text())


def test_a_summary_round_trips_in_the_runners_layout_with_its_extra_keys_in_place(tmp_path):
    run_dir, stored = summary_of(tmp_path, selection={"role": "tune"})
    layout = [k for k in SUMMARY_LAYOUT if k != "elapsed_s"]  # a synthetic run has no process time
    assert list(stored) == [*layout, "selection", "schema_version"]
    summary = Summary.from_json(stored, "s:1")
    assert summary.extra == {"selection": {"role": "tune"}} and summary.metrics["prompts"] == 2
    assert summary.to_json() == stored and list(summary.to_json()) == list(stored)
    timed = Summary.from_json({**{k: v for k, v in stored.items() if k != "schema_version"}, "elapsed_s": 3.0,
                               "schema_version": 2}).to_json()
    assert list(timed)[-4:] == ["records_sha256", "selection", "elapsed_s", "schema_version"]
    assert summary_problem(run_dir) == (stored, None)


def test_a_summary_without_a_version_may_lack_the_later_metrics(tmp_path):
    run_dir, stored = summary_of(tmp_path)
    old = {k: v for k, v in stored.items() if k not in ("schema_version", "root_optimum", "decode_token_rate")}
    assert Summary.from_json(old).schema_version == 1
    with pytest.raises(SummaryError, match=r"^s:1: root_optimum is missing$"):  # version 2 has every metric
        Summary.from_json({**old, "schema_version": 2}, "s:1")
    with pytest.raises(SummaryError, match=r"^s:1: mbsu is missing$"):  # no version lacks the first metrics
        Summary.from_json({k: v for k, v in old.items() if k != "mbsu"}, "s:1")


@pytest.mark.parametrize("change, message", [
    ({"complete": False}, "not a complete run summary"),
    ({"seed": "drop"}, "seed must be an integer, got '(missing)'"),
    ({"task": "drop"}, "task must be a string or null, got '(missing)'"),
    ({"target_params": 0}, "target_params must be an integer >= 1, got 0"),
    ({"prompt_ids": ["p0", 1]}, "prompt_ids must be a list of prompt ids, got ['p0', 1]"),
    ({"schema_version": "2"}, "schema_version must be one of 1, 2 (this rsd reads versions up to 2), got '2'"),
])
def test_a_bad_summary_is_one_line_naming_the_file_the_key_and_what_it_must_be(tmp_path, change, message):
    _, stored = summary_of(tmp_path)
    bad = {k: v for k, v in {**stored, **change}.items() if v != "drop"}
    with pytest.raises(SummaryError) as err:
        Summary.from_json(bad, "run/summary.json:1")
    assert str(err.value) == f"run/summary.json:1: {message}"


def test_the_runner_writes_the_layout_with_the_version_last(tmp_path):
    [summary] = run(run_cfg("model_pair=tiny_llama", f"out_dir={tmp_path}", "sampling.max_new_tokens=4",
                                "dataset.num_prompts=2", "dataset.max_prompt_tokens=12", "drafter=sd"))
    lines = (tmp_path / summary["run_dir"].split(str(tmp_path) + "/")[1] / "records.jsonl").read_text().splitlines()
    for line in map(json.loads, lines):
        cut = ["prompt_tokens_before_truncation"] if "prompt_tokens_before_truncation" in line else []
        assert list(line) == [*RECORD_LAYOUT, *cut, "schema_version"] and line["schema_version"] == 2
    assert any("prompt_tokens_before_truncation" in json.loads(x) for x in lines)
    assert list(summary) == [*SUMMARY_LAYOUT, "schema_version"]
    assert summary["target_params"] > 0 and summary["prompt_ids"] == [json.loads(x)["prompt_id"] for x in lines]


def test_every_committed_record_and_summary_reads_and_the_first_two_studies_as_version_1():
    """The first two editions' records predate schema version 2; the third edition's are written as version 2."""
    archives = sorted((ROOT / "docs" / "results").rglob("*.tar.gz"))
    records = summaries = 0
    for archive in archives:
        version = 1 if {"embedded-v1", "embedded-v3", "instruments"} & set(archive.relative_to(ROOT).parts) else 2
        with tarfile.open(archive) as tar:
            for member in tar:
                if member.name.endswith("/records.jsonl"):
                    for n, line in enumerate(tar.extractfile(member).read().splitlines(), 1):
                        assert Record.from_json(json.loads(line), f"{member.name}:{n}").schema_version == version
                        records += 1
                elif member.name.endswith("/summary.json"):
                    stored = json.loads(tar.extractfile(member).read())
                    assert Summary.from_json(stored, f"{member.name}:1").schema_version == version
                    summaries += 1
    assert len(archives) > 30 and summaries > 1000 and records > summaries * 8
