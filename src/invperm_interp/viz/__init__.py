"""Pictures of circuits and runs: weight heatmaps and the circuit figure (matplotlib), attention
patterns (circuitsvis, offline), training curves, the sweep figure, and the HTML pages built from
them (one report per run, one index per folder of runs) in one page shell (``page``: the style, and
the circuitsvis bundle inlined or shared, loaded after the first paint). A run's report draws its
figures as SVG without matplotlib (``svg``, ``scales``, ``charts``; ``weight_maps``, ``curves``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .attention import attention_views, save_attention_html
    from .heatmaps import plot_circuit, plot_dependency, plot_patching, save_figures
    from .index import write_index
    from .page import page, write_bundle
    from .report import report_html, write_report
    from .sweep import plot_sweep
    from .training import plot_training

_HOMES = {"attention_views": "attention", "save_attention_html": "attention",
          "write_bundle": "page", "page": "page",
          "plot_circuit": "heatmaps", "plot_dependency": "heatmaps", "plot_patching": "heatmaps",
          "save_figures": "heatmaps",
          "write_index": "index", "report_html": "report", "write_report": "report",
          "plot_sweep": "sweep", "plot_training": "training"}
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
__all__ = ["attention_views", "page", "plot_circuit", "plot_dependency", "plot_patching",
           "plot_sweep", "plot_training", "report_html", "save_attention_html", "save_figures",
           "write_bundle", "write_index", "write_report"]
