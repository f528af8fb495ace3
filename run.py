"""Hydra entry point: `python run.py` (one run) and `python run.py -m ...` (sweeps). See README.md."""

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
    main()
