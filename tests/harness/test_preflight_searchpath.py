"""The sweep's pre-flight composes with the sweep's own search path (a user's drafter from `hydra.searchpath`), and a
pre-flight that cannot run stops the sweep with one line instead of Hydra's warning and an unchecked launch."""

import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from helpers.config import CONF, ROOT
from rsd.harness.plan.build import build_plan
from rsd.harness.preflight import PreflightOnSweepStart, search_path_override

EXAMPLE = ROOT / "examples" / "topk_tree"
SEARCH = f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]"
TINY = ["model_pair=tiny_llama", "dataset.num_prompts=1", "sampling.max_new_tokens=4"]
ENV = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(EXAMPLE),
       "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}


def sweep_config(tmp_path: Path, *overrides: str):
    """The config `run.py -m OVERRIDES` hands the callback (hydra overrides and config sources included)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=[*overrides, f"out_dir={tmp_path}"], return_hydra_config=True)


def test_the_search_path_is_passed_on_to_the_preflight(tmp_path):
    cfg = sweep_config(tmp_path, SEARCH, "drafter=topk_tree", *TINY)
    assert search_path_override(cfg) == [f"hydra.searchpath=['file://{EXAMPLE / 'conf'}']"]
    assert search_path_override(sweep_config(tmp_path, *TINY)) == []


def test_a_user_drafter_from_the_search_path_is_planned(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    plan = build_plan([SEARCH, "drafter=ar,sd,topk_tree", *TINY])
    assert plan.jobs == 3 and not plan.job_errors and not plan.problems
    assert {m for m, _ in plan.runs} == {"ar", "sd", "topk_tree"}
    PreflightOnSweepStart().on_multirun_start(sweep_config(tmp_path, SEARCH, "drafter=topk_tree", *TINY))
    out = capsys.readouterr()
    assert "[rsd] pre-flight: 1 jobs, 1 runs planned" in out.out and "will fail" not in out.err


def test_a_preflight_that_cannot_compose_stops_the_sweep_in_one_line(tmp_path, capsys):
    cfg = sweep_config(tmp_path, SEARCH, "drafter=topk_tree", *TINY)
    for source in cfg.hydra.runtime.config_sources:
        if source.provider == "hydra.searchpath in command-line":
            source.path = str(tmp_path / "absent")  # the drafter's directory, gone
    with pytest.raises(SystemExit) as exit_info:
        PreflightOnSweepStart().on_multirun_start(cfg)
    assert exit_info.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "pre-flight could not run (MissingConfigException: " in err[0]
    assert "Could not find 'drafter/topk_tree'" in err[0] and "RSD_SKIP_PREFLIGHT=1" in err[0]


def test_the_guides_sweep_runs_its_preflight(tmp_path, monkeypatch, run_py):
    """docs/adding_a_drafter.md's sweep, on the tiny pair: pre-flight printed, no callback warning, every job run."""
    monkeypatch.syspath_prepend(str(EXAMPLE))  # the guide's PYTHONPATH
    proc = run_py("-m", "drafter=ar,topk_tree", SEARCH, *TINY, f"out_dir={tmp_path / 'out'}", env=ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[rsd] pre-flight: 2 jobs, 2 runs planned" in proc.stdout
    assert "raised" not in proc.stderr and "UserWarning" not in proc.stderr
    assert proc.stdout.count("results: ") == 2


def test_a_sweep_whose_preflight_cannot_run_launches_nothing(tmp_path, run_py):
    proc = run_py("-m", "drafter=ar,topk_tree", *TINY, f"hydra.searchpath=[file://{tmp_path / 'absent'}]",
                  f"out_dir={tmp_path / 'out'}", env=ENV)
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if line.startswith("error:")] == [
        "error: the sweep's pre-flight could not run (MissingConfigException: In 'config': Could not find "
        "'drafter/topk_tree'); fix that, or set RSD_SKIP_PREFLIGHT=1 to launch without it"]
    assert "Launching" not in proc.stdout + proc.stderr and not (tmp_path / "out").exists()
