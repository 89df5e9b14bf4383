"""The error a bad configuration value raises: a ``ValueError`` that names its field."""

from __future__ import annotations

from collections.abc import Iterable


class ConfigError(ValueError):
    """A configuration field or argument with a bad value; ``field`` is its name (``"n_heads"``),
    which callers such as the sweep grid read instead of parsing the message."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def check_choice(field: str, value, choices: Iterable, optional: bool = False) -> None:
    """A :class:`ConfigError` unless ``value`` is one of ``choices`` (or ``None`` if ``optional``):
    ``"{field} must be one of (...), got {value!r}"``."""
    choices = tuple(choices)
    if (value is None and optional) or value in choices:
        return
    alternative = " or None" if optional else ""
    raise ConfigError(field, f"{field} must be one of {choices}{alternative}, got {value!r}")
