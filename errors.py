"""Errors that mean "the user asked for something invalid", reported as one line by `cli.py`."""


class ConfigError(ValueError):
    """A bad name, size or option in a config; the message names the problem and the valid choices."""


class DivergedError(RuntimeError):
    """Training produced a non-finite loss; the message says at which step and what to try."""
