"""Refactors preserve behaviour: every method's tokens and counters on the tiny pair equal the recorded fixture."""

import importlib.util
import json
from pathlib import Path

HERE = Path(__file__).parent / "golden"


def golden() -> dict:
    spec = importlib.util.spec_from_file_location("make_golden", HERE / "make_golden.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.golden()


def test_records_equal_the_golden_fixture():
    want = json.loads((HERE / "tiny_records.json").read_text())
    got = golden()
    assert sorted(got) == sorted(want)
    for method in want:
        assert got[method] == want[method], method
