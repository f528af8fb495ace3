"""The sweep's pre-flight check, a Hydra callback registered in conf/config.yaml:

    hydra:
      callbacks:
        preflight:
          _target_: rsd.harness.preflight.PreflightOnSweepStart

Before `python run.py -m ...` launches any job it builds the sweep's plan (rsd.harness.plan): every job validated, each
distinct model and dataset checked once (embedded, local path, cache, or a short TCP check of the hub), each pair's
memory against the resources the launcher requests for each job (hydra.launcher.gpus_per_node, mem_gb: a SLURM job's,
not the submitting machine's). It prints the number of runs planned; when anything is missing or does not fit it
prints one message listing all of it with the fix and exits with status 2, so no job is queued. A job with an
invalid config is only reported: it fails alone when launched and the other jobs keep their results. With the local
launcher a refused job prints one `[rsd] refused job ...` line (run.py, no traceback) and the sweep, once every other
job has run, exits with status 2 listing the refused jobs. RSD_SKIP_PREFLIGHT names checks to skip, comma-separated:
`memory`, `models` (e.g. when only the compute nodes see the model cache), `datasets`; `1` skips the whole plan. The
sweep directory is checked in any case (an out_dir that is a file).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from rsd.errors import ConfigError, RsdError, one_line
from rsd.harness.plan.build import SKIPPABLE, build_plan
from rsd.harness.plan.report import format_plan
from rsd.harness.plan.resources import RESOURCE_KEYS
from rsd.harness.validate import check_out_dir

REFUSED_JOBS = "refused_jobs.txt"  # in hydra.sweep.dir: one line per refused job, listed again when the sweep ends


def refuse_job(sweep_dir: str, overrides: list[str], err: Exception) -> None:
    """Say in one line that a job of the sweep in `sweep_dir` was refused, and append that line to the sweep's
    REFUSED_JOBS file (the sweep goes on; PreflightOnSweepStart lists the file's lines and exits 2 at its end)."""
    line = f"job {' '.join(overrides) or '(no overrides)'}: {err}".replace("\n", " ")
    path = Path(sweep_dir) / REFUSED_JOBS
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(line + "\n")
    print(f"[rsd] refused {line}", file=sys.stderr)


def skipped_checks(value: str) -> frozenset[str]:
    """The checks RSD_SKIP_PREFLIGHT=`value` skips: every one for 1/true/yes/on/all, else the comma-separated names
    of SKIPPABLE (a ConfigError for another name)."""
    value = value.strip().lower()
    if value in ("1", "true", "yes", "on", "all"):
        return frozenset(SKIPPABLE)
    names = frozenset(n.strip() for n in value.split(",") if n.strip() and n.strip() not in ("0", "false", "no", "off"))
    unknown = sorted(names - set(SKIPPABLE))
    if unknown:
        raise ConfigError(f"RSD_SKIP_PREFLIGHT={value}: unknown check(s) {unknown}; name some of {list(SKIPPABLE)} "
                          "(comma-separated) or 1 for all")
    return names


def check_slurm(launcher: str) -> None:
    """ConfigError (one line, before submitit's traceback) when the launcher submits to SLURM and this machine has
    no `srun` and `sbatch` on PATH."""
    if "SlurmLauncher" in launcher and not (shutil.which("srun") and shutil.which("sbatch")):
        raise ConfigError("hydra/launcher=slurm needs SLURM on this machine (no srun or sbatch on PATH): run the sweep "
                          "from a SLURM login node, or use hydra/launcher=submitit_local (local processes) or no "
                          "hydra/launcher override")


SEARCH_PATH_PROVIDERS = ("command-line", "hydra.searchpath in command-line", "hydra.searchpath in main")


def search_path_override(config: DictConfig) -> list[str]:
    """`hydra.searchpath=[...]` naming the config directories the sweep added (`hydra.searchpath`, `--config-dir`),
    for the pre-flight's own compose; [] when it added none."""
    sources = config.hydra.runtime.get("config_sources") or []
    paths = [f"{s.schema}://{s.path}" for s in sources if s.provider in SEARCH_PATH_PROVIDERS]
    if not paths:
        return []
    quoted = ["'" + p.replace("\\", "\\\\").replace("'", "\\'") + "'" for p in paths]
    return [f"hydra.searchpath=[{','.join(quoted)}]"]


class PreflightOnSweepStart(Callback):
    """Refuse a sweep before any job launches when something it needs is missing or cannot fit."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_slurm(str(config.hydra.launcher.get("_target_") or ""))
            check_out_dir(str(config.hydra.sweep.dir), key="hydra.sweep.dir (the sweep's logs, below out_dir)")
            skip = skipped_checks(os.environ.get("RSD_SKIP_PREFLIGHT", ""))
        except ConfigError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
        (Path(str(config.hydra.sweep.dir)) / REFUSED_JOBS).unlink(missing_ok=True)  # from an earlier sweep there
        if skip == set(SKIPPABLE):
            return
        launcher = {key: config.hydra.launcher.get(key) for key in RESOURCE_KEYS}  # the jobs' resources, not ours
        try:
            plan = build_plan(list(config.hydra.overrides.task) + search_path_override(config), launcher, skip)
        except RsdError as err:
            print(f"error: {one_line(err, where=False)}", file=sys.stderr)
            sys.exit(2)
        except Exception as err:  # Hydra would only warn and launch the sweep unchecked
            first = (str(err).strip().splitlines() or [""])[0]
            print(f"error: the sweep's pre-flight could not run ({type(err).__name__}: {first}); "
                  "fix that, or set RSD_SKIP_PREFLIGHT=1 to launch without it", file=sys.stderr)
            sys.exit(2)
        if plan.problems:
            print(format_plan(plan), file=sys.stderr)
            print("[rsd] sweep refused before launching any job (python -m rsd.harness.plan ... prints this plan; "
                  f"RSD_SKIP_PREFLIGHT={','.join(SKIPPABLE)} or a part of it skips those checks)", file=sys.stderr)
            sys.exit(2)
        for err in plan.job_errors:
            print(f"[rsd] pre-flight: will fail: {err}", file=sys.stderr)
        print(f"[rsd] pre-flight: {plan.jobs} jobs, {sum(plan.runs.values())} runs planned; every model and dataset "
              "is available")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        path = Path(str(config.hydra.sweep.dir)) / REFUSED_JOBS
        refused = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
        if refused:
            print(f"[rsd] {len(refused)} job(s) refused, the other jobs' results are kept (listed in {path}):",
                  file=sys.stderr)
            for line in refused:
                print(f"  {line}", file=sys.stderr)
            sys.exit(2)
