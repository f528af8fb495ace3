"""The default tier's slow variants (helpers.tiers.SLOW_VARIANTS, marked by tests/conftest.py) name real tests, are
marked slow, and each leaves at least one variant of its test in the default tier."""

import json
import subprocess
import sys
from pathlib import Path

from helpers.tiers import COLLECTED_SLOW, SLOW_VARIANTS

ROOT = Path(__file__).resolve().parent.parent
# Collect the files of SLOW_VARIANTS in a fresh process, and print each test's id with whether it is marked slow:
# for a run that did not collect those files itself (e.g. `pytest tests/test_tiers.py`).
COLLECT = """
import json, sys, pytest
class Marks:
    def pytest_collection_modifyitems(self, items):
        self.marks = {i.nodeid: i.get_closest_marker("slow") is not None for i in items}
marks = Marks()
pytest.main(["--co", "-q", "-p", "no:xdist", "-m", "", *sys.argv[1:]], plugins=[marks])
print("MARKS" + json.dumps(marks.marks))
"""


def collected_marks(request) -> dict[str, bool]:
    """Test id -> marked slow, for every test of SLOW_VARIANTS' files: from this session's collection (before the -m
    selection) when it holds those files, else from a fresh collection."""
    files = sorted({v.split("::")[0] for v in SLOW_VARIANTS})
    seen = request.config.stash.get(COLLECTED_SLOW, {})
    if all(any(test.startswith(f"{f}::") for test in seen) for f in files):
        return seen
    out = subprocess.run([sys.executable, "-c", COLLECT, *files], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out[out.rindex("MARKS") + len("MARKS"):])


def test_every_slow_variant_is_a_test_and_leaves_a_default_variant(request):
    slow = collected_marks(request)
    assert all(slow.get(v) for v in SLOW_VARIANTS), [v for v in SLOW_VARIANTS if not slow.get(v)]
    for variant in SLOW_VARIANTS:
        function = variant.split("[")[0]
        assert any(not marked and test.split("[")[0] == function for test, marked in slow.items()), function
