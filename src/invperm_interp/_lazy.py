"""Public names that load on first use (PEP 562), so that importing a stage costs nothing until a
name is used: ``invperm --help`` does not wait for torch, and a training process never imports
TransformerLens through a package ``__init__``."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def lazy_exports(package: str, homes: dict[str, str]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package``: ``homes`` maps each public name to the submodule
    (relative to ``package``) that defines it."""

    def __getattr__(name: str):
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{homes[name]}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(homes))

    return __getattr__, __dir__
