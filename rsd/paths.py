"""The repository's configuration directory, defined once (a leaf module: it imports nothing from rsd)."""

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
