"""Expand a Hydra sweep (a preset's `hydra.sweeper.params` plus command-line sweeps) into one override list per job.

Used by the SLURM task-list generator (slurm/make_tasks.py) and by the tests that validate every preset's jobs.
"""

from __future__ import annotations

import itertools

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

from rsd.paths import CONF_DIR


def expand_jobs(overrides: list[str]) -> list[list[str]]:
    """The override list of every job `python run.py -m OVERRIDES` would launch (basic sweeper order)."""
    parser = OverridesParser.create()
    # Hydra composes only plain values: the preset's sweeper params are read with the command-line sweeps left out
    plain = [ov.input_line for ov in parser.parse_overrides(overrides) if not ov.is_sweep_override()]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=plain, return_hydra_config=True)
    params = {str(k): str(v) for k, v in (cfg.hydra.sweeper.params or {}).items()}
    fixed, axes = [], {}
    for ov in parser.parse_overrides([f"{k}={v}" for k, v in params.items()] + overrides):
        key = ov.get_key_element()
        if ov.is_sweep_override():
            axes[key] = [f"{key}={v}" for v in ov.sweep_string_iterator()]
        else:
            axes.pop(key, None)  # a plain command-line value replaces the preset's sweep over that key
            fixed.append(ov.input_line)
    return [fixed + list(job) for job in itertools.product(*axes.values())]
