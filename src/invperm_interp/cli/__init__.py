"""The ``invperm`` command: ``main`` parses the subcommands (one module each where they are more than
a few lines); ``args`` holds the argument types they share."""

from __future__ import annotations

from .main import main

__all__ = ["main"]
