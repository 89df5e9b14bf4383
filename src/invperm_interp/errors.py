"""The error a bad configuration value raises, a ``ValueError`` that names its field, and the checks
the configurations, the grids and the command line share (a choice, a seed, a thread count)."""

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


#: Seeds are integers in [0, 2^62): a run seeds its init, data and eval streams with 4s, 4s + 1
#: and 4s + 2 (``training.trainer.seed_streams``), and torch's generators take seeds below 2^64.
#: Analysis seeds take the same bound, so one ``--seed`` means one thing on every subcommand.
SEED_BOUND = 2**62
#: Torch threads are at most this many: far more than these small models use on any CPU. A fixed
#: bound, not one from this machine's cores, checks a grid or a config the same wherever it is
#: read (a login node, its cluster's nodes); libgomp crashed the process asked for 100,000.
MAX_THREADS = 1024


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_seed(field: str, value) -> None:
    """A :class:`ConfigError` unless ``value`` is a seed: ``"{field} must be an integer in
    [0, 2^62), got {value!r}"`` (:data:`SEED_BOUND`)."""
    if not (_integer(value) and 0 <= value < SEED_BOUND):
        raise ConfigError(field, f"{field} must be an integer in [0, 2^62), got {value!r}")


def check_threads(field: str, value) -> None:
    """A :class:`ConfigError` unless ``value`` is a torch thread count in [1, :data:`MAX_THREADS`]."""
    if not (_integer(value) and 1 <= value <= MAX_THREADS):
        raise ConfigError(field, f"{field} must be an integer in [1, {MAX_THREADS}], got {value!r}")
