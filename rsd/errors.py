"""User-facing errors: raised early, before work is lost, with a message that says what was wrong and what to do."""


class RsdError(Exception):
    """Bad input or a missing resource; `run.py` prints the message alone, without a traceback."""


class ConfigError(RsdError, ValueError):
    """An invalid or inconsistent configuration value."""
