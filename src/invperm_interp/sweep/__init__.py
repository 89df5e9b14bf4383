"""Sweeps: a grid file (``load_grid``) expands to jobs, the engine trains them through submitit
(local processes or a Slurm job array) and collects ``sweep.jsonl``, and the report turns that into
a table and a figure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .collect import SweepRow, read_rows, read_sweep
    from .engine import run_sweep
    from .grid import Grid, Job, load_grid

_HOMES = {"SweepRow": "collect", "read_rows": "collect", "read_sweep": "collect",
          "run_sweep": "engine", "Grid": "grid", "Job": "grid", "load_grid": "grid"}
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
__all__ = ["Grid", "Job", "SweepRow", "load_grid", "read_rows", "read_sweep", "run_sweep"]
