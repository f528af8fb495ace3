"""`python run.py ARGS` run inside the test process, for tests of what the command prints, exits with and writes.

A subprocess pays 4-7 s of interpreter, torch and transformers start-up per call; here the modules are already
imported. Tests of what needs a process of its own (SIGKILL, two sweeps at once, the real exit path) keep using
subprocesses. Output is read through pytest's capsys.
"""

import os
import runpy
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra

from helpers.config import ROOT


@dataclass
class Completed:
    """What the command left: its exit status and what it wrote to stdout and to stderr."""

    returncode: int
    stdout: str
    stderr: str


def _protect_captured_stderr() -> None:
    """Hydra's logging set-up (dictConfig) closes every logging handler ever created, and absl's handler (imported
    with the ROUGE scorer) then closes its stream unless it is the current sys.stderr: that stream is pytest's
    capture from the test that imported absl, and closing it breaks pytest. Point the handler at the real stderr."""
    absl_logging = sys.modules.get("absl.logging")
    if absl_logging is not None:
        absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__


class RunPy:
    """`run_py(*ARGS, env=...)`: `python run.py ARGS` in this process (the `run_py` fixture of tests/conftest.py)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> Completed:
        """Run the script as the interpreter would: the exit status of SystemExit, 1 with the traceback on stderr
        for an uncaught exception, each warning on stderr. argv, the environment, the working directory, torch's
        threads and Hydra's state are restored after."""
        saved_env, saved_argv, saved_cwd, threads = dict(os.environ), sys.argv, os.getcwd(), torch.get_num_threads()
        self.capsys.readouterr()
        _protect_captured_stderr()
        os.environ.update(env or {})
        sys.argv = ["run.py", *args]
        os.chdir(cwd)
        GlobalHydra.instance().clear()
        code, caught = 0, []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("default")
                try:
                    runpy.run_path(str(ROOT / "run.py"), run_name="__main__")  # the script, as `python run.py`
                except SystemExit as exit_:
                    code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
                    if exit_.code is not None and not isinstance(exit_.code, int):
                        print(exit_.code, file=sys.stderr)
                except Exception:  # noqa: BLE001  (the interpreter's behaviour: traceback, exit 1)
                    traceback.print_exc()
                    code = 1
        finally:
            GlobalHydra.instance().clear()
            os.chdir(saved_cwd)
            sys.argv = saved_argv
            os.environ.clear()
            os.environ.update(saved_env)
            torch.set_num_threads(threads)
        out = self.capsys.readouterr()
        stderr = out.err + "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line)
                                   for w in caught)
        return Completed(code, out.out, stderr)
