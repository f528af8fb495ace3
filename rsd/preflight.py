"""The sweep's pre-flight check, a Hydra callback registered in conf/config.yaml:

    hydra:
      callbacks:
        preflight:
          _target_: rsd.preflight.PreflightOnSweepStart

Before `python run.py -m ...` launches any job it builds the sweep's plan (rsd.plan): every job validated, each
distinct model and dataset checked once (embedded, local path, cache, or a short TCP check of the hub), each pair's
memory against the GPUs requested. It prints the number of runs planned; when anything is missing or does not fit it
prints one message listing all of it with the fix and exits with status 2, so no job is queued. A job with an
invalid config is only reported: it fails alone when launched, as before, and the other jobs keep their results.
RSD_SKIP_PREFLIGHT=1 skips it (e.g. when only the compute nodes can see the model cache).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from rsd.plan import build_plan, format_plan


class PreflightOnSweepStart(Callback):
    """Refuse a sweep before any job launches when something it needs is missing or cannot fit."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if os.environ.get("RSD_SKIP_PREFLIGHT", "").strip().lower() in ("1", "true", "yes", "on"):
            return
        plan = build_plan(list(config.hydra.overrides.task))
        if plan.problems:
            print(format_plan(plan), file=sys.stderr)
            print("[rsd] sweep refused before launching any job (python -m rsd.plan ... prints this plan; "
                  "RSD_SKIP_PREFLIGHT=1 skips the check)", file=sys.stderr)
            sys.exit(2)
        for err in plan.job_errors:
            print(f"[rsd] pre-flight: will fail: {err}", file=sys.stderr)
        print(f"[rsd] pre-flight: {plan.jobs} jobs, {sum(plan.runs.values())} runs planned; every model and dataset "
              "is available")
