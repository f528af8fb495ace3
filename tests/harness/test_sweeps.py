"""Resumable, idempotent sweeps; local submitit and (faked) SLURM launchers; wandb offline logging."""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.config import ROOT, compose_cfg, run_cfg
from rsd.harness.config import resolve_config
from rsd.harness.runner import run
from rsd.harness.store import scan_records

TIMING_KEYS = {"wall_s", "time_draft_s", "time_target_s", "time_other_s", "ttft_s", "decode_s", "decode_token_rate",
               "peak_gpu_memory_gb"}
TINY = ["model_pair=tiny_llama", "dataset=xsum_builtin", "dataset.num_prompts=6", "drafter=rsd_s"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}


def python_run(*args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "run.py", *args], cwd=ROOT, env=env or ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kw)


def stable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]


def read_records(path: Path) -> list[dict]:
    """The valid records of a records file (the store's reader; its problems are not these tests' subject)."""
    return scan_records(path)[0]


def only_run_dir(root: Path) -> Path:
    [summary] = list(root.rglob("run.json"))
    return summary.parent


def test_sigkill_then_rerun_equals_uninterrupted_run(tmp_path, capsys):
    """A process killed mid-run, then the same job rerun (in this process: the rerun path is `run`, as run.py's)."""
    reference = run(run_cfg(*TINY, f"out_dir={tmp_path / 'ref'}", "sampling.max_new_tokens=64"))[0]
    want = stable(read_records(Path(reference["run_dir"]) / "records.jsonl"))

    out = tmp_path / "killed"
    proc = python_run(*TINY, f"out_dir={out}", "sampling.max_new_tokens=64")
    deadline = time.time() + 120
    while time.time() < deadline:
        recs = list(out.rglob("records.jsonl"))
        if recs and 2 <= recs[0].read_bytes().count(b"\n") < 6:  # two complete records, more to come
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    run_dir = only_run_dir(out)
    assert not (run_dir / "summary.json").exists()
    partial = read_records(run_dir / "records.jsonl")
    assert 2 <= len(partial) < 6

    capsys.readouterr()
    run(run_cfg(*TINY, f"out_dir={out}", "sampling.max_new_tokens=64"))
    assert "resuming" in capsys.readouterr().out
    got = stable(read_records(run_dir / "records.jsonl"))
    assert got == want  # every prompt once, identical to the uninterrupted run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["new_tokens"] == reference["new_tokens"]
    assert summary["block_efficiency"] == reference["block_efficiency"]


class FullDisk:
    """A records file on a disk that fills up: half of each write lands, then it fails with ENOSPC, as a real full
    disk fails it."""

    def __init__(self, f) -> None:
        self.f = f

    def __enter__(self) -> "FullDisk":
        return self

    def __exit__(self, *exc) -> None:
        self.f.close()

    def write(self, text: str) -> None:
        self.f.write(text[: len(text) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_is_one_line_and_a_rerun_completes_the_run(tmp_path, capsys, monkeypatch, run_py):
    """`python run.py ARGS` with a disk that fills up while the second prompt's record is appended."""
    args = ["model_pair=tiny_llama", "dataset.num_prompts=2", "sampling.max_new_tokens=8", "drafter=sd"]
    reference = run(run_cfg(*args, f"out_dir={tmp_path / 'ref'}"))[0]
    want = stable(read_records(Path(reference["run_dir"]) / "records.jsonl"))
    real_open, appends = Path.open, []

    def open_(path, mode="r", *a, **kw):
        f = real_open(path, mode, *a, **kw)
        if path.name == "records.jsonl" and "a" in mode:
            appends.append(path)
            return FullDisk(f) if len(appends) > 1 else f
        return f

    out = tmp_path / "full"
    with monkeypatch.context() as patched:
        patched.setattr(Path, "open", open_)
        full = run_py(*args, f"out_dir={out}")
    assert full.returncode == 1, full.stderr
    errors = [line for line in full.stderr.splitlines() if not line.startswith("[rsd] ")]  # less progress lines
    assert len(errors) == 1, full.stderr
    records = only_run_dir(out) / "records.jsonl"
    assert errors[0].startswith(f"error: writing {records} failed: {os.strerror(errno.ENOSPC)}. Nothing finished was "
                                "lost"), errors
    assert "rerun the same command to resume" in errors[0]
    assert len(read_records(records)) == 1  # the first prompt's record, intact

    capsys.readouterr()
    run(run_cfg(*args, f"out_dir={out}"))  # the rerun
    assert "resuming" in capsys.readouterr().out
    assert stable(read_records(records)) == want


def test_torn_last_line_is_cut_and_resumed(tmp_path):
    cfg = run_cfg(*TINY, f"out_dir={tmp_path}", "sampling.max_new_tokens=10")
    [first] = run(cfg)
    run_dir = Path(first["run_dir"])
    lines = (run_dir / "records.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "summary.json").unlink()
    (run_dir / "records.jsonl").write_text("".join(lines[:3]) + lines[3][: len(lines[3]) // 2])  # power loss
    [second] = run(cfg)
    assert stable(read_records(run_dir / "records.jsonl")) == stable([json.loads(x) for x in lines])
    assert second["new_tokens"] == first["new_tokens"]


@pytest.mark.slow  # a real multi-job sweep (~20 s); the default tier's in-process tests cover the runner
def test_rerun_of_a_finished_sweep_skips(tmp_path):
    args = ["-m", *TINY[:-1], "drafter=ar,sd", "sampling.max_new_tokens=8", f"out_dir={tmp_path}"]
    first = python_run(*args)
    assert first.wait(timeout=300) == 0
    mtimes = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("summary.json")}
    assert len(mtimes) == 2
    second = python_run(*args)
    log = second.communicate(timeout=300)[0]
    assert second.returncode == 0
    assert log.count("done already, skipping") == 2
    assert mtimes == {p: p.stat().st_mtime_ns for p in tmp_path.rglob("summary.json")}


def test_failing_job_is_reported_and_others_keep_results(tmp_path, run_py):
    proc = run_py("-m", "model_pair=tiny_llama", "drafter=sd,spectr", "budget=fixed_compute",
                  "budget.target_tokens=6", "+budget.shape={num_sequences:2}", "dataset.num_prompts=2",
                  "sampling.max_new_tokens=8", f"out_dir={tmp_path}")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 2, log
    assert "[rsd] refused job model_pair=tiny_llama drafter=sd" in log and "Traceback" not in log
    assert "1 job(s) refused, the other jobs' results are kept" in log
    assert "has no shape meeting budget B6" in log
    [listed] = list(tmp_path.rglob("refused_jobs.txt"))  # in the sweep's own directory, not in a module global
    [line] = listed.read_text().splitlines()
    assert line.startswith("job model_pair=tiny_llama drafter=sd ") and "has no shape meeting budget B6" in line
    [done] = list(tmp_path.rglob("summary.json"))
    assert "spectr-K2xL3" in str(done)


def test_sweep_into_a_file_is_refused_before_any_job(tmp_path, run_py):
    target = tmp_path / "results"
    target.write_text("not a directory")
    proc = run_py("-m", "drafter=ar,sd", f"out_dir={target}")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 2, log
    assert f"{target} is a file" in log and "choose another out_dir" in log and "Traceback" not in log
    assert target.read_text() == "not a directory"


@pytest.mark.slow  # a real multi-job sweep (~20 s); the default tier's in-process tests cover the runner
def test_submitit_local_two_job_sweep(tmp_path):
    proc = python_run("-m", "hydra/launcher=submitit_local", "model_pair=tiny_opt", "drafter=ar,rsd_c",
                      "dataset.num_prompts=2", "sampling.max_new_tokens=8", f"out_dir={tmp_path}")
    log = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, log
    assert len(list(tmp_path.rglob("summary.json"))) == 2
    assert list(tmp_path.rglob(".submitit"))


@pytest.mark.slow  # a real multi-job sweep (~20 s); the default tier's in-process tests cover the runner
def test_slurm_launcher_renders_an_array_job(tmp_path):
    """SLURM cannot run here: fake sbatch/srun/sacct on PATH run the array tasks locally, as SLURM would."""
    fake = ROOT / "tests" / "fake_slurm"
    env = {**ENV, "PATH": f"{fake}:{ENV['PATH']}", "FAKE_SLURM_DIR": str(tmp_path / "slurm")}
    proc = python_run("-m", "hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.gpus_per_node=2",
                      "hydra.launcher.array_parallelism=1", "hydra.launcher.timeout_min=90",
                      "hydra.launcher.setup=[echo rsd-setup-hook]", "model_pair=tiny_llama", "drafter=sd,specinfer",
                      "dataset.num_prompts=2", "sampling.max_new_tokens=8", f"out_dir={tmp_path / 'out'}", env=env)
    log = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, log
    [script] = list((tmp_path / "slurm").glob("sbatch-*.sh"))
    text = script.read_text()
    for line in ("#SBATCH --array=0-1%1", "#SBATCH --partition=gpu", "#SBATCH --gpus-per-node=2",
                 "#SBATCH --time=90", "#SBATCH --signal=USR2@120", "echo rsd-setup-hook", "srun "):
        assert line in text, line
    assert len(list((tmp_path / "out").rglob("summary.json"))) == 2


def test_slurm_launcher_without_slurm_fails_at_once(tmp_path, run_py):
    proc = run_py("-m", "hydra/launcher=slurm", "model_pair=tiny_llama", f"out_dir={tmp_path}",
                  env={"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin"})
    assert proc.returncode != 0 and "srun" in proc.stdout + proc.stderr


def test_wandb_offline_writes_its_directory_and_none_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)  # a user's exported WANDB_MODE always wins (rsd/harness/logger.py)
    [s] = run(run_cfg("model_pair=tiny_llama", "dataset.num_prompts=2", "sampling.max_new_tokens=6",
                      "logger=wandb", "logger.mode=offline", f"out_dir={tmp_path / 'w'}"))
    offline = list(Path(s["run_dir"]).glob("wandb/offline-run-*"))
    assert offline and list(offline[0].glob("*.wandb"))
    [s] = run(run_cfg("model_pair=tiny_llama", "dataset.num_prompts=2", "sampling.max_new_tokens=6",
                      f"out_dir={tmp_path / 'n'}"))
    assert not list((tmp_path / "n").rglob("wandb"))
    assert sorted(p.name for p in Path(s["run_dir"]).iterdir()) == ["records.jsonl", "run.json", "summary.json"]


def test_wandb_online_without_a_key_is_refused_before_the_run(tmp_path, monkeypatch):
    from rsd.errors import ConfigError

    for var in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc with a key
    cfg = compose_cfg("model_pair=tiny_llama", "dataset.num_prompts=2", "sampling.max_new_tokens=6", "logger=wandb",
                      "logger.mode=online", f"out_dir={tmp_path / 'w'}")
    with pytest.raises(ConfigError, match="logger.mode=online needs a W&B API key"):
        run(resolve_config(cfg))
    assert not (tmp_path / "w").exists()
    monkeypatch.setenv("WANDB_MODE", "online")
    with pytest.raises(ConfigError, match="WANDB_MODE=online needs a W&B API key"):
        run(run_cfg("model_pair=tiny_llama", "logger=wandb", f"out_dir={tmp_path / 'w'}"))


def test_two_sweeps_started_in_the_same_second_get_their_own_log_directories(tmp_path, monkeypatch):
    import datetime
    import itertools

    from hydra import compose, initialize_config_dir

    from helpers.config import CONF

    ticks = itertools.count(1)

    class SameSecond(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.datetime(2026, 1, 2, 3, 4, 5, next(ticks))  # always the same second

    monkeypatch.setattr("hydra.core.utils.datetime", SameSecond)  # the clock of Hydra's ${now:} resolver
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        dirs = [str(compose(config_name="config", overrides=[f"out_dir={tmp_path}"], return_hydra_config=True)
                    .hydra.sweep.dir) for _ in range(2)]
    assert dirs[0] != dirs[1] and all(d.startswith(f"{tmp_path}/.hydra/multirun/2026-01-02_03-04-05") for d in dirs)
