"""Every model pair a config can name has a display name in the report (analysis.names.PAIRS)."""

from pathlib import Path

import yaml

from analysis.names import PAIRS, pair_name

CONF = Path(__file__).resolve().parents[2] / "conf" / "model_pair"


def test_every_configured_pair_has_a_display_name() -> None:
    names = {yaml.safe_load(path.read_text())["name"] for path in CONF.glob("*.yaml")}
    assert names, f"no model pair configs under {CONF}"
    assert sorted(names - set(PAIRS)) == []
    assert all(pair_name(name) != name for name in names)
