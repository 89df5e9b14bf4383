"""The note's mathematics as code: the block templates of an attention cell (``I``, ``J``, ``1``),
the analytic constructions as real weights, and the exact causal floor that Theorem 1 implies.
docs/design.md sections 4 to 6."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .cells import cell_template
    from .constructions import ConstructionSpec, build, register, verify
    from .floors import causal_floor, dependency_map, exact_floor_enumeration
    from .registry import Wiring

_HOMES = {"cell_template": "cells", "ConstructionSpec": "constructions", "build": "constructions",
          "register": "constructions", "verify": "constructions", "causal_floor": "floors",
          "dependency_map": "floors", "exact_floor_enumeration": "floors", "Wiring": "registry"}
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
__all__ = ["ConstructionSpec", "build", "causal_floor", "cell_template", "dependency_map",
           "exact_floor_enumeration", "register", "verify", "Wiring"]
