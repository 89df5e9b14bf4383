"""Argument types the ``invperm`` subcommands share (``cli``, ``cli_analyze``)."""

from __future__ import annotations

import argparse

MAX_MEMORY_HELP = "memory limit for the size check, e.g. 8G (default: what the machine has left)"


def size(text: str) -> int:
    """``--max-memory``: ``8G``, ``500M``, ``2e9`` → bytes (argparse reports a bad one)."""
    from ..memory import parse_size

    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
