"""Doc text a new user checks against the code (issue 34): the README's size of the guide's example, the
benchmarks' machine line naming the CPU."""

import re
from pathlib import Path

from benchmarks.common import cpu_name, machine

ROOT = Path(__file__).resolve().parent.parent


def test_readme_states_the_guide_examples_length():
    guide = (ROOT / "docs" / "adding_a_drafter.md").read_text()
    section = guide[guide.index("## 4."):].split("\n## ")[0]
    longest = max(len(block.splitlines()) for block in re.findall(r"```python\n(.*?)```", section, re.S))
    assert f"(§4, {longest} lines)" in (ROOT / "README.md").read_text()


def test_the_machine_line_names_the_cpu():
    if Path("/proc/cpuinfo").exists() and "model name" in Path("/proc/cpuinfo").read_text():
        assert cpu_name() != "unknown" and "CPU unknown" not in machine()
