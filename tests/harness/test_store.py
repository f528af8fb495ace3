"""The results store: one owner per run directory, corruption repaired, identity covers what a run reads, reruns of a
finished job load nothing, prompts cut by dataset.max_prompt_tokens, and no path outside out_dir."""

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import rsd.harness.execute
import rsd.harness.runner
from helpers.config import ROOT, run_cfg
from helpers.runs import record
from rsd.data import load_examples
from rsd.errors import ConfigError
from rsd.harness.files import RunLock
from rsd.harness.identity import safe_component
from rsd.harness.prompts import prepare_prompts
from rsd.harness.runner import run
from rsd.harness.runs import plan_runs, run_dir_for, run_inputs
from rsd.harness.schema import Dataset
from rsd.harness.store import complete_summary, scan_records
from rsd.models.pairs import encode_prompt, load_pair_tokenizer
from rsd.models.source import model_source
from rsd.models.tiny import ByteTokenizer

TINY = ["model_pair=tiny_llama", "dataset=xsum_builtin", "dataset.num_prompts=4", "sampling.max_new_tokens=8"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}


def stable(records: list[dict]) -> list[dict]:
    """Records without their timings (which differ between two runs of the same thing)."""
    return [{k: v for k, v in r.items() if not (k.endswith("_s") or k.endswith("_rate"))} for r in records]


def lines_of(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def planned_dirs(*overrides: str) -> list[Path]:
    rc = run_cfg(*overrides)
    return [p.run_dir for p in plan_runs(rc, run_inputs(rc, load_examples(rc.dataset)))]


# ------------------------------------------------------------------------------------------------- concurrency
def hold_lock(run_dir: Path) -> subprocess.Popen:
    """Another process holding `run_dir`'s lock (until it is killed)."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys; sys.path.insert(0, sys.argv[2]); from pathlib import Path; from rsd.harness.files import RunLock; "
        "import time; lock = RunLock(Path(sys.argv[1])).__enter__(); print(lock.held, flush=True); time.sleep(120)"),
        str(run_dir), str(ROOT)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "True"
    return holder


def test_lock_is_exclusive_and_dies_with_its_holder(tmp_path):
    run_dir = tmp_path / "run"
    holder = hold_lock(run_dir)
    try:
        with RunLock(run_dir) as lock:
            assert not lock.held
    finally:
        holder.kill()  # SIGKILL: no cleanup runs in the holder
        holder.wait()
    with RunLock(run_dir) as lock:
        assert lock.held
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run.lock"]  # beside the run directory, not in it


def test_a_run_held_by_another_process_is_left_to_it_and_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(rsd.harness.runner, "BUSY_POLL_S", 0.01)
    monkeypatch.setattr(rsd.harness.runner, "BUSY_WAIT_S", 0.05)
    overrides = [*TINY, "drafter=sd", f"out_dir={tmp_path}"]
    [run_dir] = planned_dirs(*overrides)
    run_dir.mkdir(parents=True)
    with RunLock(run_dir) as lock:
        assert run(run_cfg(*overrides)) == []
    out = capsys.readouterr().out
    assert "another process is running" in out and "then tries it again" in out
    assert out.count("[rsd] waiting for up to 0.05 s on 1 run(s) another process holds") == 1
    assert f"not in this job's results: {run_dir} is still being run by another process (it holds {lock.path})" in out
    assert not (run_dir / "records.jsonl").exists()
    [summary] = run(run_cfg(*overrides))  # the lock is free again: the run is done now
    assert complete_summary(run_dir, summary["prompt_ids"]) is not None


def test_a_run_whose_holder_dies_is_taken_over_and_resumed(reference_run, tmp_path, capsys, monkeypatch):
    """The holder dies after this job found its run busy: the job takes the run over (from the records the holder
    left) instead of ending with an empty table."""
    monkeypatch.setattr(rsd.harness.runner, "BUSY_POLL_S", 0.01)
    ref_out, rel = reference_run
    run_dir = tmp_path / rel
    run_dir.mkdir(parents=True)
    want = (ref_out / rel / "records.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "records.jsonl").write_text(want[0])  # the holder had finished its first prompt
    holder = hold_lock(run_dir)
    execute_or_record = rsd.harness.runner._execute_or_record

    def holder_dies_once_found_busy(*args):
        summary = execute_or_record(*args)
        if summary is None:
            holder.kill()
            holder.wait()
        return summary

    monkeypatch.setattr(rsd.harness.runner, "_execute_or_record", holder_dies_once_found_busy)
    try:
        [summary] = run(run_cfg(*TINY, "drafter=sd", f"out_dir={tmp_path}"))
    finally:
        holder.kill()
        holder.wait()
    out = capsys.readouterr().out
    assert "another process is running" in out and f"resuming {run_dir}: 1 of {len(want)} prompts" in out
    assert stable(lines_of(run_dir / "records.jsonl")) == stable([json.loads(x) for x in want])
    assert complete_summary(run_dir, summary["prompt_ids"]) is not None


def test_two_identical_sweeps_at_once_record_every_prompt_once(tmp_path):
    args = [sys.executable, "run.py", "-m", *TINY, "sampling.max_new_tokens=16", "drafter=ar,sd",
            f"out_dir={tmp_path}"]
    procs = [subprocess.Popen(args, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    records = sorted(tmp_path.rglob("records.jsonl"))
    assert len(records) == 2
    for path in records:
        ids = [r["prompt_id"] for r in lines_of(path)]
        assert ids == [f"xsum-0{i}" for i in range(1, 5)]  # each prompt exactly once, in order
        assert complete_summary(path.parent, ids) is not None
    assert not list(tmp_path.rglob("*.tmp"))


# --------------------------------------------------------------------------------------------------- corruption
@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    [summary] = run(run_cfg(*TINY, "drafter=sd", f"out_dir={out}"))
    return out, Path(summary["run_dir"]).relative_to(out)


def _cut_line_2(lines):
    lines[1] = lines[1][: len(lines[1]) // 2] + "\n"


def _garbage_line_2(lines):
    lines[1] = "\x00\x01 garbage\n"


def _duplicate_line_1_as_3(lines):
    lines.insert(2, lines[0])


def _empty_object_as_line_2(lines):
    lines.insert(1, "{}\n")


def _drop_line_3(lines):
    del lines[2]


def _torn_last_line(lines):
    lines[-1] = lines[-1][: len(lines[-1]) // 2]


def _edit_line_2(**change):
    """Line 2 edited by hand (keys set to None are removed): valid JSON that breaks the record schema or invariants."""
    def damage(lines):
        rec = {**json.loads(lines[1]), **change}
        lines[1] = json.dumps({k: v for k, v in rec.items() if v is not None}) + "\n"
    return damage


CORRUPTIONS = {  # name: (how the records file is damaged, or None for the summary; line warned about; re-decoded)
    "garbage_summary": (None, "summary.json:1", 0),
    "truncated_interior_line": (_cut_line_2, "records.jsonl:2", 1),
    "garbage_interior_line": (_garbage_line_2, "records.jsonl:2", 1),
    "duplicated_record": (_duplicate_line_1_as_3, "records.jsonl:3", 0),
    "empty_object_line": (_empty_object_as_line_2, "records.jsonl:2", 0),
    "record_missing_under_summary": (_drop_line_3, "summary.json:1", 1),
    "torn_last_line": (_torn_last_line, "records.jsonl:4", 1),
    "zero_target_calls": (_edit_line_2(target_calls=0), "records.jsonl:2", 1),
    "missing_draft_calls": (_edit_line_2(draft_calls=None), "records.jsonl:2", 1),
    "string_new_tokens": (_edit_line_2(new_tokens="eight"), "records.jsonl:2", 1),
    "list_prompt_id": (_edit_line_2(prompt_id=[1]), "records.jsonl:2", 1),
    "tokens_beyond_the_steps": (_edit_line_2(new_tokens=99, new_token_ids=[1] * 99), "records.jsonl:2", 1),
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_corruption_is_reported_and_repaired(kind, reference_run, tmp_path, capsys, monkeypatch):
    ref_out, rel = reference_run
    out = tmp_path / "out"
    shutil.copytree(ref_out, out)
    run_dir = out / rel
    want = (run_dir / "records.jsonl").read_text()
    damage, where, redecoded = CORRUPTIONS[kind]
    if damage is None:
        (run_dir / "summary.json").write_text('{"complete": true, "prompt_ids": [')
    else:
        lines = want.splitlines(keepends=True)
        damage(lines)
        (run_dir / "records.jsonl").write_text("".join(lines))
    decoded = []
    real_decode = rsd.harness.execute.decode_prompt
    monkeypatch.setattr(rsd.harness.execute, "decode_prompt",
                        lambda *a, **k: decoded.append(a[2].id) or real_decode(*a, **k))

    [summary] = run(run_cfg(*TINY, "drafter=sd", f"out_dir={out}"))
    err = capsys.readouterr().err
    assert f"{run_dir / where}" in err, err
    assert len(decoded) == redecoded
    got = lines_of(run_dir / "records.jsonl")
    assert stable(got) == stable([json.loads(x) for x in want.splitlines()])  # every prompt once, in order
    assert complete_summary(run_dir, summary["prompt_ids"]) is not None

    run(run_cfg(*TINY, "drafter=sd", f"out_dir={out}"))  # repaired for good: a rerun is silent and skips
    assert "warning" not in capsys.readouterr().err


def test_a_summary_edited_by_hand_is_not_done_already(reference_run, tmp_path, capsys, monkeypatch):
    ref_out, rel = reference_run
    out = tmp_path / "out"
    shutil.copytree(ref_out, out)
    path = out / rel / "summary.json"
    want = json.loads(path.read_text())
    path.write_text(json.dumps({**want, "block_efficiency": 9.99}))
    monkeypatch.setattr(rsd.harness.execute, "decode_prompt", lambda *a, **k: pytest.fail("every record is valid"))
    [summary] = run(run_cfg(*TINY, "drafter=sd", f"out_dir={out}"))
    captured = capsys.readouterr()
    assert "done already" not in captured.out and f"{path}:1: block_efficiency=9.99 disagrees" in captured.err
    assert summary["block_efficiency"] == want["block_efficiency"] != 9.99


def test_scan_keeps_every_valid_line_after_a_bad_one(tmp_path):
    path = tmp_path / "records.jsonl"
    rec = record("a", [1, 0], 1.0, 50.0, 1, 1)
    path.write_text(json.dumps(rec) + "\nnot json\n[1]\n" + json.dumps({**rec, "prompt_id": "b"}) + "\n"
                    + json.dumps({**rec, "prompt_id": "zz"}) + "\n")
    records, problems = scan_records(path, ["a", "b"])
    assert [r["prompt_id"] for r in records] == ["a", "b"]
    assert [p.split(": ")[0] for p in problems] == [f"{path}:2", f"{path}:3", f"{path}:5"]


# ----------------------------------------------------------------------------------------------------- identity
def test_editing_a_local_dataset_changes_the_run(tmp_path):
    data = tmp_path / "prompts.jsonl"
    rows = [{"id": "a", "prompt": "first prompt"}, {"id": "b", "prompt": "second prompt"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["model_pair=tiny_llama", "dataset=local", "sampling.max_new_tokens=4", f"out_dir={tmp_path / 'out'}"]
    [first] = run(run_cfg(*args, f"dataset.path={data}"))
    rows[1]["prompt"] = "a different and longer second prompt"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    [second] = run(run_cfg(*args, f"dataset.path={data}"))
    assert second["run_dir"] != first["run_dir"]
    assert lines_of(Path(second["run_dir"]) / "records.jsonl")[1]["prompt_tokens"] == 1 + len(rows[1]["prompt"])
    moved = tmp_path / "moved.jsonl"  # the same examples from another path: the same run, done already
    shutil.copy(data, moved)
    [third] = run(run_cfg(*args, f"dataset.path={moved}"))
    assert third["run_dir"] == second["run_dir"]


def test_model_files_fingerprint_follows_the_files_without_loading_them(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "model.safetensors").write_bytes(b"not even safetensors")  # never read as weights
    fp = model_source(str(model)).fingerprint()
    args = ["model_pair=smollm2", f"model_pair.target={model}", f"out_dir={tmp_path}"]
    [before] = planned_dirs(*args)
    os.utime(model / "model.safetensors", ns=(time.time_ns(), time.time_ns() + 10**9))  # touched
    assert model_source(str(model)).fingerprint() != fp
    [after] = planned_dirs(*args)
    assert after != before
    (model / "config.json").write_text('{"model_type": "opt"}')
    os.utime(model / "config.json", ns=(0, 0))
    assert model_source(str(model)).fingerprint() != fp


def test_hub_fingerprint_is_the_cached_revision(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    assert model_source("org/model").fingerprint() == {"spec": "org/model", "hub_revision": None}
    repo = tmp_path / "models--org--model"
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    assert model_source("org/model").fingerprint()["hub_revision"] == "abc123"
    draft = model_source("embedded:smollm2-draft").fingerprint()
    assert "model.safetensors" in draft["sha256"] and draft == model_source("embedded:smollm2-draft").fingerprint()


# ------------------------------------------------------------------------------------------ skipping, progress
def test_rerun_of_a_finished_job_loads_no_model(tmp_path, capsys, monkeypatch):
    cfg = run_cfg(*TINY, "dataset.num_prompts=2", "drafter=sd", f"out_dir={tmp_path}")
    [first] = run(cfg)
    out = capsys.readouterr()
    assert "this job plans 1 run(s); 0 already complete" in out.out
    progress = [x for x in out.err.splitlines() if x.startswith("[rsd] sd L4 seed 0: prompt")]
    assert len(progress) == 2 and "(2/2)" in progress[1] and "running" in progress[1]

    def refuse(*_a, **_k):
        raise AssertionError("a finished job loaded a model")

    monkeypatch.setattr(rsd.harness.runner, "load_pair", refuse)
    monkeypatch.setattr(rsd.harness.runner, "load_pair_tokenizer", refuse)
    [again] = run(cfg)
    assert again == first
    assert "1 already complete" in capsys.readouterr().out


@pytest.fixture
def read_only(monkeypatch):
    """Make a directory tree read-only. Root ignores permissions: then every way rsd writes is refused instead, as a
    read-only mount refuses them (the out_dir probe, the run lock, directories and files)."""
    trees = []

    def make(root: Path) -> None:
        trees.append(root)
        for p in [root, *root.rglob("*")]:
            p.chmod(0o555 if p.is_dir() else 0o444)
        if os.access(root, os.W_OK):
            def erofs(*_a, **_k):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS))

            def open_for_reading(path, mode="r", *args, **kwargs):
                return erofs() if set(mode) & set("wax+") else real_open(path, mode, *args, **kwargs)

            real_open = Path.open
            monkeypatch.setattr(tempfile, "mkdtemp", erofs)
            monkeypatch.setattr(RunLock, "__enter__", erofs)
            monkeypatch.setattr(Path, "mkdir", erofs)
            monkeypatch.setattr(Path, "open", open_for_reading)

    yield make
    for root in trees:  # writable again, so that pytest can remove it
        for p in [root, *root.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)


def test_a_finished_job_on_a_read_only_mount_is_read(reference_run, tmp_path, capsys, monkeypatch, read_only):
    ref_out, rel = reference_run
    out = tmp_path / "ro"
    shutil.copytree(ref_out, out)
    want = json.loads((out / rel / "summary.json").read_text())
    locks = sorted(out.rglob(".*.lock"))

    def refuse(*_a, **_k):
        raise AssertionError("a finished job loaded a model")

    monkeypatch.setattr(rsd.harness.runner, "load_pair", refuse)
    monkeypatch.setattr(rsd.harness.runner, "load_pair_tokenizer", refuse)
    read_only(out)
    assert run(run_cfg(*TINY, "drafter=sd", f"out_dir={out}")) == [want]
    assert f"done already, skipping: {out / rel}" in capsys.readouterr().out
    with pytest.raises(ConfigError, match=r"is not writable .* and this job has runs to do"):
        run(run_cfg(*TINY, "drafter=ar", f"out_dir={out}"))  # refused before any model loads
    assert sorted(out.rglob(".*.lock")) == locks


def test_max_prompt_tokens_cuts_and_records(tmp_path):
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"id": "long", "prompt": "y" * 300}) + "\n" + json.dumps({"id": "short", "prompt": "hi"})
                    + "\n")
    args = ["model_pair=tiny_llama", "dataset=local", f"dataset.path={data}", "sampling.max_new_tokens=4",
            f"out_dir={tmp_path}"]
    [cut] = run(run_cfg(*args, "dataset.max_prompt_tokens=50"))
    long, short = lines_of(Path(cut["run_dir"]) / "records.jsonl")
    assert long["prompt_tokens"] == 50 and long["prompt_tokens_before_truncation"] == 301
    assert short["prompt_tokens"] == 3 and "prompt_tokens_before_truncation" not in short
    [whole] = run(run_cfg(*args))
    assert whole["run_dir"] != cut["run_dir"]
    with pytest.raises(ConfigError, match="dataset.max_prompt_tokens must be a positive integer"):
        run(run_cfg(*args, "dataset.max_prompt_tokens=0"))


def test_truncation_keeps_the_text_start_and_the_whole_chat_template():
    tok = load_pair_tokenizer(run_cfg("model_pair=smollm2").model_pair)
    ex = load_examples(Dataset("xsum_builtin"))[0]
    full = encode_prompt(tok, True, ex.prompt)
    [(_, ids)], cut = prepare_prompts([ex], tok, True, 60)
    assert len(ids) <= 60 and cut == {ex.id: len(full)}
    assert ids[-4:] == full[-4:]  # the generation prompt ("<|im_end|>\n<|im_start|>assistant\n") is whole
    assert tok.decode(ids).find("Summarize the following news article") >= 0
    with pytest.raises(ConfigError, match="leaves no room"):
        prepare_prompts([ex], tok, True, 5)
    [(_, same)], none = prepare_prompts([ex], ByteTokenizer(), False, None)
    assert none == {} and same == ByteTokenizer().encode(ex.prompt)


# --------------------------------------------------------------------------------------------------------- paths
HOSTILE = ["x/../../..", "/abs/path", "..", ".", "", "a\x00b", "~", "../" * 40 + "etc", "-rf", "név mit Leerzeichen"]


@pytest.mark.parametrize("value", HOSTILE)
def test_no_config_value_leads_outside_out_dir(tmp_path, value):
    out = tmp_path / "out"
    ident = {"model_pair": {"name": value}, "dataset": {"name": value}, "seed": value,
             "sampling": {"temperature": value, "top_k": value, "top_p": value, "max_new_tokens": value},
             "drafter": {"name": value, "shape": {"draft_length": value}}}
    path = run_dir_for(out, ident, None)
    assert path.resolve().is_relative_to(out.resolve())
    assert len(path.relative_to(out).parts) == 5
    for part in path.relative_to(out).parts:
        assert part == safe_component(part) and not part.startswith(".") and "/" not in part


@pytest.mark.parametrize("name", ["/abs/path", "x/../../.."])
def test_a_pair_name_from_the_command_line_stays_inside(tmp_path, name):
    [planned] = planned_dirs("model_pair=tiny_llama", f"model_pair.name='{name}'", f"out_dir={tmp_path}")
    assert planned.resolve().is_relative_to(tmp_path.resolve())
