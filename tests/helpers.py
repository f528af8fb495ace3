"""Shared test helpers: compose the real Hydra config with overrides."""

from pathlib import Path

from hydra import compose, initialize_config_dir

CONF = Path(__file__).resolve().parent.parent / "conf"
ROOT = CONF.parent


def compose_cfg(*overrides: str):
    """The resolved config `python run.py OVERRIDES` would see."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))
