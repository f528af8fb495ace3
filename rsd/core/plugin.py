"""Calling a user's plug-in code (a drafter's build, a verifier's verify or expected_yield): the wrapper that names
the plug-in when it raises, and the type test both contracts apply to what it returns."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from rsd.errors import RsdError, one_line

T = TypeVar("T")


class PluginError(RsdError, RuntimeError):
    """A drafter's build or a verifier's verify or expected_yield raised (the message names it and the exception)."""


def is_token(value: object, size: int) -> bool:
    """`value` is a Python int (not a bool, a float or a tensor) in [0, size): a token id or a node index."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < size


def plugin_call(fn: Callable[..., T], who: str, *args: object) -> T:
    """`fn(*args)`; whatever it raises but an RsdError becomes a PluginError naming `who` ("drafter 'x' build"),
    the original chained (and in the run's error.json)."""
    try:
        return fn(*args)
    except RsdError:
        raise
    except Exception as err:
        raise PluginError(f"{who} raised {type(err).__name__}: {one_line(err)}; fix the plug-in (the whole "
                          "traceback is in the run directory's error.json)") from err
