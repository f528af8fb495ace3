"""The documentation's commands and references work: scripts and paths exist, every documented run.py command composes
with Hydra and plans (sweeps expanded job by job), and no message recommends a CLI the hub library no longer has.

Nothing is loaded: plan_runs validates a config without touching models or data.
"""

import importlib
import importlib.util
import re
import shlex
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers.config import CONF, ROOT, representative_jobs, run_cfg
from rsd.harness.runs import plan_runs
from rsd.harness.sweep import expand_jobs

# The repository's own top-level directories: a path under one of them, named in conf/, must exist.
TOP_DIRS = ("analysis", "benchmarks", "conf", "docs", "examples", "experiments", "rsd", "slurm", "tests")
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted(CONF.rglob("*.yaml")),
             *sorted(f for f in (ROOT / "slurm").rglob("*") if f.suffix in (".md", ".sbatch", ".py"))]
# Files whose fenced blocks (markdown) or lines (scripts) hold commands a user runs as written.
COMMAND_FILES = [ROOT / "README.md", ROOT / "slurm" / "README.md", *sorted((ROOT / "experiments").glob("*.sh"))]


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_every_referenced_experiment_script_exists():
    refs = {(rel(f), m) for f in DOC_FILES if f.is_file()
            for m in re.findall(r"experiments/[\w.-]+\.sh", f.read_text(encoding="utf-8"))}
    assert refs, "no references found: the pattern is wrong"
    missing = sorted((f, m) for f, m in refs if not (ROOT / m).is_file())
    assert not missing, f"referenced but missing: {missing}"


def test_every_path_and_target_named_in_conf_exists():
    path_re = re.compile(r"(?<![\w./${-])((?:" + "|".join(TOP_DIRS) + r")/[\w./-]*\w)")
    named, missing = 0, []
    for f in sorted(CONF.rglob("*.yaml")):
        for path in path_re.findall(f.read_text(encoding="utf-8")):
            named += 1
            if not (ROOT / path).exists():
                missing.append((rel(f), path))
        node = OmegaConf.to_container(OmegaConf.load(f), resolve=False)
        for target in re.findall(r"'_target_': '([\w.]+)'", str(node)):
            if target.split(".")[0] in ("rsd", "analysis"):
                named += 1
                module, _, attr = target.rpartition(".")
                if not hasattr(importlib.import_module(module), attr):
                    missing.append((rel(f), target))
    assert named >= 10 and not missing, f"named in conf/ but missing: {missing}"


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """(file, command line, argv after the script) for every `python run.py ...` / `python slurm/make_tasks.py ...`."""
    found = []
    for f in COMMAND_FILES:
        text = f.read_text(encoding="utf-8")
        blocks = re.findall(r"^```[\w-]*\n(.*?)^```", text, re.M | re.S) if f.suffix == ".md" else [text]
        for line in (ln for block in blocks for ln in block.replace("\\\n", " ").splitlines()):
            for segment in line.split("&&"):
                words = shlex.split(segment, comments=True)
                words = words[: next((i for i, w in enumerate(words) if w in (">", ">>", "<", "|")), len(words))]
                if words[:1] == ["python"] and words[1:2] in (["run.py"], ["slurm/make_tasks.py"]):
                    found.append((rel(f), segment.strip(), [w for w in words[1:] if not w.startswith("$")]))
    return found


COMMANDS = documented_commands()


def make_tasks_module():
    """slurm/make_tasks.py as a module (slurm/ is not a package)."""
    spec = importlib.util.spec_from_file_location("make_tasks", ROOT / "slurm" / "make_tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_commands_are_found():
    files = {f for f, _, _ in COMMANDS}
    assert {"README.md", "slurm/README.md"} <= files and any(f.startswith("experiments/") for f in files)
    assert any(argv[1:2] == ["-m"] for _, _, argv in COMMANDS)


# The paper scripts' commands (2-3 s each) run in the slow tier but one; their presets validate for every drafter
# in tests/config/test_configs.py.
DEFAULT_SCRIPTS = ("README.md", "slurm/README.md", "experiments/fig_opt_fixed_length.sh")


@pytest.mark.parametrize("argv", [pytest.param(argv, id=f"{f}: {c}", marks=() if not f.startswith("experiments/fig_")
                                               or f in DEFAULT_SCRIPTS else pytest.mark.slow)
                                  for f, c, argv in COMMANDS])
def test_documented_command_composes_and_plans(argv):
    script, args = argv[0], argv[1:]
    sweep = script == "slurm/make_tasks.py" or any(a in ("-m", "--multirun") for a in args)
    overrides = [a for a in args if a not in ("-m", "--multirun")]
    if script == "slurm/make_tasks.py":  # its own options (--out FILE, ...) are not overrides
        overrides = make_tasks_module().split_argv(overrides)[1]
    jobs = representative_jobs(expand_jobs(overrides)) if sweep else [overrides]
    for job in jobs:
        assert plan_runs(run_cfg(*job)), job


def test_no_message_or_doc_recommends_huggingface_cli():
    files = [*DOC_FILES, *sorted((ROOT / "rsd").rglob("*.py")), *sorted((ROOT / "experiments").glob("*.*")),
             ROOT / "run.py"]
    stale = [rel(f) for f in files if f.is_file() and "huggingface-cli" in f.read_text(encoding="utf-8")]
    assert not stale, f"`huggingface-cli` is gone from huggingface_hub; recommend `hf download`: {stale}"
