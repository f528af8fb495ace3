"""User-facing errors: raised early, before work is lost, with a message that says what was wrong and what to do."""

import traceback
from pathlib import Path


class RsdError(Exception):
    """Bad input or a missing resource; `run.py` prints the message alone, without a traceback."""


class ConfigError(RsdError, ValueError):
    """An invalid or inconsistent configuration value."""


def one_line(err: BaseException, where: bool = True) -> str:
    """An exception's message on one line (its type's name when it has none), with the file:line it was raised at
    when `where` (for errors raised in a user's own code)."""
    text = " ".join(str(err).split()) or type(err).__name__
    frames = traceback.extract_tb(err.__traceback__) if where else []
    return text + (f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else "")
