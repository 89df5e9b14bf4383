"""A grid's ``seeds``: which seeds each point of the grid is trained with.

A seed list is written as a count ``n`` (seeds 0 … n−1), a range ``{start = a, stop = b}`` or a list
of integers; every seed lies in [0, 2^62) (``errors.SEED_BOUND``, as ``--seed``). ``seeds`` may
also be a table of such lists chosen per axis value, e.g. ``seeds = {default = 16, "d=10" = 64}``:
a point takes the list of the one ``"field=value"`` key it matches (``field`` a ``[model]`` or
``[train]`` field of the grid, ``value`` a TOML value equal to the point's, ``"lr=1e-2"`` for
``lr = 0.01``, or its text), else ``default``. A ``[[variants]]``
table's own ``seeds`` replaces the top-level one. Counts and ranges stay ``range`` objects: nothing is
built for a count of a billion before the grid's size is checked.
"""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ..errors import SEED_BOUND

RANGE_KEYS = {"start", "stop"}


class SeedError(ValueError):
    """A malformed seeds entry; ``key`` is the grid key it is about (``seeds``, ``seeds."d=10"``)."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def seed_list(key: str, value) -> list[int] | range:
    """One seed list from its count, range (a ``range``) or list form; :class:`SeedError`
    otherwise."""
    if isinstance(value, dict):
        if set(value) != RANGE_KEYS:
            raise SeedError(key, f"a range is {{start = a, stop = b}}, got keys {sorted(value)}")
        value = range(value["start"], value["stop"]) if all(
            _is_int(v) for v in value.values()) else None
    elif _is_int(value):
        value = range(max(value, 0))
    if isinstance(value, range):
        if value and value.start >= 0 and value.stop <= SEED_BOUND:
            return value
        value = None
    if not isinstance(value, list) or not value or not all(
            _is_int(s) and 0 <= s < SEED_BOUND for s in value):
        raise SeedError(key, "must be a count n >= 1, {start = a, stop = b} with a < b, or a "
                             "non-empty list of integers in [0, 2^62)")
    if len(set(value)) != len(value):
        raise SeedError(key, f"lists a seed twice: {value}")
    return value


class Seeds:
    """The seeds of every point: one list, or lists chosen by ``"field=value"`` keys."""

    def __init__(self, key: str, value, fields: tuple[str, ...]):
        self.key, self.used = key, set()
        if value == {}:
            raise SeedError(key, "is an empty table: give a count, a range, a list or "
                                 "{default = n, \"field=value\" = n}")
        if isinstance(value, dict) and set(value) != RANGE_KEYS:
            self.default = seed_list(f"{key}.default", value["default"]) if "default" in value else None
            self.by_value: dict[tuple[str, str], list[int]] = {}
            for entry, spec in value.items():
                if entry == "default":
                    continue
                field, eq, text = entry.partition("=")
                field, text = field.strip(), text.strip()
                if not eq or not field or not text:
                    raise SeedError(f"{key}.{entry!r}", "a per-value key is \"field=value\" (e.g. "
                                                        "\"d=10\") or default")
                if field not in fields:
                    raise SeedError(f"{key}.{entry!r}", f"{field!r} is not a field of the grid "
                                                        f"(known: {', '.join(fields)})")
                self.by_value[(field, text)] = seed_list(f"{key}.{entry!r}", spec)
            self.parsed = {text: _parse(text) for _, text in self.by_value}
        else:
            self.default, self.by_value, self.parsed = seed_list(key, value), {}, {}

    def _matches(self, value, text: str) -> bool:
        parsed = self.parsed[text]
        return value_text(value) == text or parsed is not None and _same(parsed, value)

    def for_point(self, values: dict[str, object]) -> list[int] | range:
        """The seeds of the point whose fields have these ``values`` (field name -> value)."""
        hits = [k for k in self.by_value if k[0] in values and self._matches(values[k[0]], k[1])]
        if len(hits) > 1:
            keys = " and ".join(f'"{f}={t}"' for f, t in hits)
            raise SeedError(self.key, f"a point matches both {keys}; give it one seed list")
        if hits:
            self.used.add(hits[0])
            return self.by_value[hits[0]]
        if self.default is None:
            point = ", ".join(f"{k}={value_text(v)}" for k, v in values.items())
            raise SeedError(self.key, f"no entry for the point {point} and no default")
        return self.default

    def check_used(self) -> None:
        """Every per-value key must match some point (a typo would otherwise go unnoticed)."""
        for field, text in self.by_value:
            if (field, text) not in self.used:
                raise SeedError(f'{self.key}."{field}={text}"', "matches no point of the grid")


def _parse(text: str):
    """A key's value as TOML reads it (``1e-2`` -> 0.01), or None where it is not a TOML value."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return None


def _same(a, b) -> bool:
    """Equal grid values, a bool never equal to a number (``True == 1`` in Python)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(map(_same, a, b))
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def value_text(value) -> str:
    """A grid value as a seeds key writes it: ``10``, ``causal``, ``0.01``, ``[2, 1]``."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(value_text, value)) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)
