"""Write a task list for slurm/array.sbatch: one line of run.py overrides per job of a sweep.

    python slurm/make_tasks.py experiment=fig_opt_fixed_length > tasks.txt
    sbatch --array=0-$(( $(wc -l < tasks.txt) - 1 ))%16 slurm/array.sbatch tasks.txt
"""

import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rsd.sweep import expand_jobs  # noqa: E402


def main() -> None:
    for job in expand_jobs(sys.argv[1:]):
        print(" ".join(shlex.quote(o) for o in job))


if __name__ == "__main__":
    main()
