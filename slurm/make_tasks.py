"""Write a task list for slurm/array.sbatch: one line of run.py overrides per job of a sweep.

    python slurm/make_tasks.py --out tasks.txt experiment=fig_opt_fixed_length model_pair=opt_125m_13b
    sbatch --array=0-$(( $(wc -l < tasks.txt) - 1 ))%16 slurm/array.sbatch tasks.txt

Before writing a line it runs the sweep's pre-flight (rsd.harness.plan: every job's config and budget shapes, the models
and datasets, each pair's memory) against the resources each array task gets: array.sbatch's `#SBATCH` lines,
or `--gpus-per-node=N` / `--mem-gb=N` when you pass the same to sbatch. A sweep that cannot run is refused with one
line and exit status 2, and nothing is written; RSD_SKIP_PREFLIGHT skips checks as for `run.py -m`. Without `--out`
the lines go to stdout.

array.sbatch reads its line back with `python slurm/make_tasks.py --args TASKS.txt INDEX`, which prints that line's
arguments NUL-separated (split as they were quoted here), so no task line is ever evaluated by a shell.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

SBATCH = Path(__file__).resolve().parent / "array.sbatch"
MEM_UNITS = {"K": 1e-6, "M": 1e-3, "G": 1.0, "T": 1e3}  # sbatch --mem suffixes, in GB (no suffix: megabytes)
OPTIONS = ("--out", "--gpus-per-node", "--mem-gb")


def task_args(tasks: Path, index: int) -> list[str]:
    """The run.py arguments of line `index` (0-based) of a task list."""
    lines = tasks.read_text(encoding="utf-8").splitlines()
    if not 0 <= index < len(lines) or not lines[index].strip():
        raise SystemExit(f"no task line {index + 1} in {tasks} ({len(lines)} lines)")
    try:
        return shlex.split(lines[index])
    except ValueError as err:
        raise SystemExit(f"{tasks}:{index + 1} cannot be split into arguments ({err})") from None


def sbatch_resources(script: Path = SBATCH) -> dict[str, str]:
    """The resources a batch script's `#SBATCH` lines request, as the launcher keys rsd.harness.plan reads
    (gpus_per_node, gres, mem_gb)."""
    found: dict[str, str] = {}
    for line in script.read_text(encoding="utf-8").splitlines():
        m = re.match(r"#SBATCH\s+--(gpus-per-node|gres|mem)[=\s]+(\S+)", line)
        if m and m[1] == "mem":
            size = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", m[2].upper())
            if size:
                found["mem_gb"] = str(float(size[1]) * MEM_UNITS[size[2] or "M"])
        elif m:
            found[m[1].replace("-", "_")] = m[2]
    return found


def split_argv(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """(this script's options, the sweep's overrides); a ConfigError for an option without a value."""
    from rsd.errors import ConfigError

    options, overrides, rest = {}, [], list(argv)
    while rest:
        arg = rest.pop(0)
        name, eq, value = arg.partition("=")
        if name not in OPTIONS:
            overrides.append(arg)
            continue
        if not eq:
            if not rest:
                raise ConfigError(f"{name} needs a value ({name}=VALUE)")
            value = rest.pop(0)
        options[name] = value
    return options, overrides


def check_sweep(overrides: list[str], resources: dict[str, str]) -> None:
    """A ConfigError naming every problem (on one line) when the sweep's pre-flight refuses it or a job's config is
    invalid, judged for array tasks that get `resources`."""
    from rsd.errors import ConfigError, RsdError
    from rsd.harness.plan.build import build_plan
    from rsd.harness.preflight import skipped_checks

    skip = skipped_checks(os.environ.get("RSD_SKIP_PREFLIGHT", ""))
    try:
        plan = build_plan(overrides, resources, skip)
    except RsdError:
        raise
    except Exception as err:  # Hydra's own errors (an override that does not parse or compose)
        first = (str(err).strip().splitlines() or [""])[0]
        raise ConfigError(f"no task list written, the sweep does not compose ({type(err).__name__}: {first})") from err
    problems = plan.problems + plan.job_errors
    if problems:
        raise ConfigError(f"no task list written, the sweep's pre-flight refused it ({len(problems)} problem(s)): "
                          + "; ".join(problems)
                          + f" (python -m rsd.harness.plan {shlex.join(overrides)} prints the plan; "
                          f"each array task gets {resources}: pass --gpus-per-node=N or --mem-gb=N here and the same "
                          "to sbatch for other resources)")


def write_tasks(argv: list[str]) -> None:
    """Check the sweep of `argv` (options and overrides), then write one quoted task line per job."""
    from rsd.harness.sweep import expand_jobs

    options, overrides = split_argv(argv)
    resources = sbatch_resources()
    if "--gpus-per-node" in options:
        resources = {k: v for k, v in resources.items() if k != "gres"} | {"gpus_per_node": options["--gpus-per-node"]}
    if "--mem-gb" in options:
        resources["mem_gb"] = options["--mem-gb"]
    check_sweep(overrides, resources)
    text = "".join(" ".join(shlex.quote(o) for o in job) + "\n" for job in expand_jobs(overrides))
    if "--out" not in options:
        sys.stdout.write(text)
        return
    out = Path(options["--out"])
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)


def main() -> None:
    if sys.argv[1:2] == ["--args"]:
        sys.stdout.write("".join(arg + "\0" for arg in task_args(Path(sys.argv[2]), int(sys.argv[3]))))
        return
    from rsd.errors import RsdError  # not needed by --args: an array task reads its line with the standard library

    try:
        write_tasks(sys.argv[1:])
    except RsdError as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
