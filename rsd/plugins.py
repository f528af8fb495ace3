"""Import what a config names by dotted path (a drafter's `_target_`, a verifier): one place for the error message."""

from __future__ import annotations

import importlib
from typing import Any

from rsd.errors import ConfigError


def import_object(dotted: str, what: str, hint: str) -> Any:
    """The object at `package.module.Name`; a ConfigError naming `what` and saying `hint` when it cannot be imported."""
    module_name, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"{what} {dotted!r} cannot be imported ({err}); {hint}") from None
