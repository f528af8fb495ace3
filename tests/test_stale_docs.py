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


def test_slurm_absence_is_one_rsd_line(monkeypatch, tmp_path):
    """hydra/launcher=slurm on a machine without SLURM: one line naming what to do, not submitit's traceback."""
    import pytest

    from rsd.errors import ConfigError
    from rsd.harness.preflight import check_slurm

    launcher = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="hydra/launcher=slurm needs SLURM") as info:
        check_slurm(launcher)
    assert "\n" not in str(info.value)
    check_slurm("hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher")  # local processes: fine
    monkeypatch.setenv("PATH", str(ROOT / "tests" / "fake_slurm"))
    check_slurm(launcher)  # srun and sbatch on PATH
