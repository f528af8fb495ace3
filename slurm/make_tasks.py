"""Write a task list for slurm/array.sbatch: one line of run.py overrides per job of a sweep.

    python slurm/make_tasks.py experiment=fig_opt_fixed_length > tasks.txt
    sbatch --array=0-$(( $(wc -l < tasks.txt) - 1 ))%16 slurm/array.sbatch tasks.txt

array.sbatch reads its line back with `python slurm/make_tasks.py --args TASKS.txt INDEX`, which prints that line's
arguments NUL-separated (split as they were quoted here), so no task line is ever evaluated by a shell.
"""

import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def task_args(tasks: Path, index: int) -> list[str]:
    """The run.py arguments of line `index` (0-based) of a task list."""
    lines = tasks.read_text(encoding="utf-8").splitlines()
    if not 0 <= index < len(lines) or not lines[index].strip():
        raise SystemExit(f"no task line {index + 1} in {tasks} ({len(lines)} lines)")
    try:
        return shlex.split(lines[index])
    except ValueError as err:
        raise SystemExit(f"{tasks}:{index + 1} cannot be split into arguments ({err})") from None


def main() -> None:
    if sys.argv[1:2] == ["--args"]:
        sys.stdout.write("".join(arg + "\0" for arg in task_args(Path(sys.argv[2]), int(sys.argv[3]))))
        return
    from rsd.sweep import expand_jobs

    for job in expand_jobs(sys.argv[1:]):
        print(" ".join(shlex.quote(o) for o in job))


if __name__ == "__main__":
    main()
