"""Hydra entry point: `python run.py` (one run), `python run.py -m ...` (sweeps) and `python run.py ... --plan` (the
pre-flight plan of rsd/plan.py, launching nothing). See README.md."""

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from rsd.errors import RsdError
from rsd.runner import format_table, run


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        summaries = run(cfg)
    except RsdError as err:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise  # Hydra reports the failing job with its overrides; the sweep's other jobs keep their results
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(format_table(summaries))
    for s in summaries:
        print(f"results: {s['run_dir']}")


if __name__ == "__main__":
    if "--plan" in sys.argv[1:]:  # before Hydra parses argv: print the sweep's pre-flight plan, launch nothing
        from rsd.plan import main as plan_main

        sys.exit(plan_main([a for a in sys.argv[1:] if a != "--plan"]))
    main()
