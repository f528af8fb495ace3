"""Hydra entry point: `python run.py` (one run), `python run.py -m ...` (sweeps) and `python run.py ... --plan` (the
pre-flight plan of rsd/harness/plan/, launching nothing). See README.md."""

import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from rsd.errors import RsdError
from rsd.harness.config import resolve_config
from rsd.harness.files import StorageFullError
from rsd.harness.preflight import refuse_job
from rsd.harness.runner import format_table, run

LOCAL_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"  # runs every job in this process


def discard_hydra_output() -> None:
    """Remove what Hydra wrote for this single run (its copies of the config and the job log), for a refused run.

    Only those files are deleted, and directories only once empty, so a run sharing the directory loses nothing.
    """
    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    sub = out / hc.output_subdir if hc.output_subdir else None
    files = [sub / name for name in ("config.yaml", "hydra.yaml", "overrides.yaml")] if sub else []
    for f in [*files, out / f"{hc.job.name}.log"]:
        f.unlink(missing_ok=True)
    dirs = [sub, out] if sub else [out]
    if out.parent.name == "outputs":  # conf/config.yaml's hydra.run.dir; never a directory the user chose
        dirs.append(out.parent)
    for d in dirs:
        try:
            os.rmdir(d)
        except OSError:
            break


def sweep_hint() -> str | None:
    """The line to print when a preset that declares a sweep runs without -m (it would run one job, silently)."""
    hc = HydraConfig.get()
    params = hc.sweeper.get("params") if hc.mode != RunMode.MULTIRUN else None
    if not params:
        return None
    keys = ", ".join(sorted(str(k) for k in params))
    return (f"note: this config declares a sweep over {keys} (hydra.sweeper.params); without -m it runs one job "
            "with the defaults. Add -m to run the whole sweep: python run.py -m ...")


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    hint = sweep_hint()
    if hint:
        print(hint, file=sys.stderr)
    try:
        summaries = run(resolve_config(cfg))  # every check, once, before anything loads or is written
    except StorageFullError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)  # a sweep stops too: its next jobs would load their models only to fail the same way
    except RsdError as err:
        hc = HydraConfig.get()
        if hc.mode == RunMode.MULTIRUN:
            if hc.launcher._target_ != LOCAL_LAUNCHER:
                raise  # the job runs in its own process (submitit): its launcher reports the failure
            refuse_job(hc.sweep.dir, list(hc.overrides.task), err)  # the sweep goes on, exits 2 at its end
            return
        discard_hydra_output()
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(format_table(summaries))
    for s in summaries:
        print(f"results: {s['run_dir']}")


if __name__ == "__main__":
    if "--plan" in sys.argv[1:]:  # before Hydra parses argv: print the sweep's pre-flight plan, launch nothing
        from rsd.harness.plan.report import main as plan_main

        sys.exit(plan_main([a for a in sys.argv[1:] if a != "--plan"]))
    main()
