"""SLURM submission passes the same pre-flight as a local sweep: the paper scripts give the 66B/70B pairs two GPUs
per job in a sweep of their own (README's `experiments/fig_opt_fixed_length.sh hydra/launcher=slurm ...` passes, with
fake SLURM tools), a user's smaller request is still refused, and slurm/make_tasks.py refuses an infeasible sweep in
one line before writing a task line."""

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.config import ROOT

README_LINE = "experiments/fig_opt_fixed_length.sh hydra/launcher=slurm hydra.launcher.partition=gpu"
FEW = ["drafter=sd", "budget.draft_length=2", "dataset=xsum"]  # extra arguments go to every sweep: fewer jobs
ENV = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1", "RSD_GPU_MEMORY_GB": "80",
       "RSD_SKIP_PREFLIGHT": "models,datasets"}  # a login node: 80 GB GPUs assumed, the hub models not cached here

spec = importlib.util.spec_from_file_location("make_tasks", ROOT / "slurm" / "make_tasks.py")
make_tasks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_tasks)


def slurm_bin(tmp_path: Path) -> Path:
    """A PATH directory: SLURM's srun (tests/fake_slurm), an sbatch that keeps the submitted script and fails (the
    sweep stops at its first submission), and a python that runs run.py but skips the report."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").symlink_to(ROOT / "tests" / "fake_slurm" / "srun")
    (bin_dir / "sbatch").write_text(f'#!/usr/bin/env bash\ncp "${{@: -1}}" "$(mktemp {tmp_path}/sbatch-XXXX)"\n'
                                    'echo "sbatch: error: the test stops here" >&2\nexit 1\n')
    (bin_dir / "python").write_text(f'#!/usr/bin/env bash\n[ "$1 $2" = "-m analysis.report" ] && exit 0\n'
                                    f'{sys.executable} "$@"; echo "$? $*" >> {tmp_path}/sweeps\n')
    for tool in ("sbatch", "python"):
        (bin_dir / tool).chmod(0o755)
    return bin_dir


def run_script(tmp_path: Path, line: str, *extra: str) -> tuple[subprocess.CompletedProcess, list[str], list[str]]:
    """(the script's process, each sweep's exit status and arguments, each submitted sbatch script's GPU request)."""
    words = shlex.split(line)
    env = ENV | {"PATH": f"{slurm_bin(tmp_path)}:/usr/bin:/bin"}
    proc = subprocess.run([str(ROOT / words[0]), *words[1:], *extra, f"out_dir={tmp_path / 'out'}"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    sweeps = (tmp_path / "sweeps").read_text().splitlines()
    gpus = [re.search(r"^#SBATCH --gpus-per-node=(\S+)", p.read_text(), re.M)[1]
            for p in sorted(tmp_path.glob("sbatch-*"), key=lambda p: p.stat().st_mtime)]
    return proc, sweeps, gpus


def assert_both_sweeps_submitted(proc, sweeps, gpus):
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(sweeps) == 2 and all(s.startswith("1 run.py -m") for s in sweeps)  # 1: the fake sbatch's failure
    assert "model_pair=opt_125m_66b,opt_350m_66b hydra.launcher.gpus_per_node=2" in sweeps[1]
    assert proc.stdout.count("[rsd] pre-flight: ") == 2 and "refused" not in proc.stderr
    assert gpus == ["1", "2"]  # the 13B/30B pairs on one GPU, the 66B pairs on two


@pytest.mark.slow  # ~25 s; the default tier composes and plans the README's SLURM command (tests/test_docs.py)
def test_the_readme_slurm_line_passes_the_preflight_for_a_few_jobs(tmp_path):
    assert README_LINE in (ROOT / "README.md").read_text()
    assert_both_sweeps_submitted(*run_script(tmp_path, README_LINE, *FEW))


@pytest.mark.slow
def test_the_readme_slurm_line_passes_the_preflight_verbatim(tmp_path):
    """The whole preset, 288 jobs in two sweeps (~90 s at load 3.5 on two cores)."""
    assert_both_sweeps_submitted(*run_script(tmp_path, README_LINE))


@pytest.mark.slow
def test_a_users_smaller_gpu_request_is_still_refused(tmp_path):
    proc, sweeps, gpus = run_script(tmp_path, README_LINE, *FEW, "hydra.launcher.gpus_per_node=1")
    assert [s.split()[0] for s in sweeps] == ["1", "2"] and gpus == ["1"]  # the 66B sweep: refused, not submitted
    assert "model pair opt_125m_66b needs" in proc.stderr and "sweep refused before launching any job" in proc.stderr


@pytest.mark.slow
def test_a_local_launcher_gets_no_slurm_resources(tmp_path):
    proc, sweeps, _ = run_script(tmp_path, "experiments/fig_opt_fixed_length.sh", *FEW, "--plan")
    assert len(sweeps) == 2 and "gpus_per_node" not in sweeps[1]


def tasks(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `python slurm/make_tasks.py ARGV`, in this process."""
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "argv", ["make_tasks.py", *argv])
    try:
        make_tasks.main()
        code = 0
    except SystemExit as err:
        code = err.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_make_tasks_reads_the_array_scripts_resources():
    assert make_tasks.sbatch_resources() == {"gpus_per_node": "1", "mem_gb": "64.0"}


def test_make_tasks_writes_the_lines_of_a_feasible_sweep(tmp_path, monkeypatch, capsys):
    code, out, err = tasks(monkeypatch, capsys, "model_pair=tiny_llama", "drafter=ar,sd")
    assert (code, err) == (0, "") and out == "model_pair=tiny_llama drafter=ar\nmodel_pair=tiny_llama drafter=sd\n"
    target = tmp_path / "tasks.txt"
    code, out, _ = tasks(monkeypatch, capsys, "--out", str(target), "experiment=fig_opt_fixed_length",
                         "--gpus-per-node=2", "model_pair=opt_125m_66b", *FEW)
    assert (code, out) == (0, "") and target.read_text().splitlines() == [
        "experiment=fig_opt_fixed_length model_pair=opt_125m_66b drafter=sd budget.draft_length=2 dataset=xsum"]


@pytest.mark.parametrize("argv, message", [
    (["model_pair=tiny_llama", "drafter=sd", "budget.draft_length=0"], "budget.draft_length=0 must be a positive"),
    (["experiment=fig_opt_fixed_length", "model_pair=opt_125m_13b,opt_125m_66b", *FEW],
     "model pair opt_125m_66b needs 137.0 GB in float16 but gets 72.0 GB"),
    (["model_pair=tiny_llama", "drafter=nope="], "the sweep does not compose (OverrideParseException"),
    (["--out"], "--out needs a value"),
])
def test_make_tasks_refuses_in_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys, argv, message):
    target = tmp_path / "tasks.txt"
    target.write_text("an earlier task list\n")
    out_args = [] if argv == ["--out"] else ["--out", str(target)]
    code, out, err = tasks(monkeypatch, capsys, *out_args, *argv)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and err.startswith("error: ")
    assert message in err and target.read_text() == "an earlier task list\n"
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.slow
def test_make_tasks_refuses_from_the_command_line(tmp_path):
    proc = subprocess.run([sys.executable, "slurm/make_tasks.py", "experiment=fig_opt_fixed_length", *FEW],
                          cwd=ROOT, env=os.environ | ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1
    assert "pass --gpus-per-node=N or --mem-gb=N here and the same to sbatch" in proc.stderr
