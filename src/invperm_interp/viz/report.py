"""The HTML report of one model: a single self-contained page a person opens in a browser.

Sections: summary, training curve (when metrics exist), the circuit (atoms of the gauge-fixed
weights), raw and gauge-fixed weight heatmaps, closest constructions, ablations, the Lemma 1
dependency map and circuitsvis attention views. Figures are embedded as PNG, the circuitsvis bundle
is inlined once: nothing is fetched from the network.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ..analysis.summary import atom_label
from ..model import HookedDisentangledTransformer
from ..task import Batch
from ..theory import dependency_map
from .attention import attention_views, page
from .heatmaps import plot_circuit, plot_dependency


def _png(fig: Figure) -> str:
    """``<img>`` holding ``fig`` as an inline PNG; closes the figure."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img style="max-width: 100%" src="data:image/png;base64,{data}">'


def plot_training(metrics: list[dict], title: str = "") -> Figure:
    """Eval MSE (log scale) against step, with the causal floor of the configuration's causal twin."""
    steps = [m["step"] for m in metrics]
    fig, ax = plt.subplots(figsize=(7, 3.4))
    ax.plot(steps, [m["mse"] for m in metrics], label="eval MSE", color="C0")
    train = [(m["step"], m["train_mse"]) for m in metrics if m.get("train_mse") is not None]
    if train:
        ax.plot(*zip(*train), label="train MSE", color="C0", alpha=0.4, linestyle="--")
    floor = metrics[-1].get("causal_floor")
    if floor is not None and floor > 0:
        ax.axhline(floor, color="C3", linestyle=":", label=f"causal floor {floor:.4g}")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("MSE (the note's loss)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return (f"<table border='1' cellpadding='4' style='border-collapse: collapse; font-size: 13px'>"
            f"<tr>{head}</tr>{body}</table>")


def _sections(model: HookedDisentangledTransformer, summary: dict, batch: Batch,
              metrics: list[dict] | None) -> list[str]:
    cfg = model.cfg
    parts = [
        "<h2>Summary</h2>",
        f"<p>{html.escape(summary['source'])}: {cfg.attention_dir} attention, layout "
        f"{html.escape(str(cfg.layout))}, {cfg.n_layers} layers, heads {list(cfg.heads)}, reads the "
        f"{cfg.readout} rows. MSE <b>{summary['mse']:.3g}</b>; the causal floor of this layout and "
        f"read-out is <b>{summary['causal_floor']:.4g}</b> (no causally masked model can go below it). "
        f"Gauge check: patterns of A and gauge_fix(A) differ by {summary['gauge_check']:.2g}.</p>",
    ]
    if metrics:
        parts += ["<h2>Training</h2>", _png(plot_training(metrics, summary["source"]))]
    atoms = sorted(summary["circuit"]["atoms"], key=lambda a: (a["layer"], a["head"], -a["share"]))
    rows = [[a["layer"] + 1, a["head"], atom_label(a), f"{abs(a['beta']):.3g}", f"{a['share']:.1%}",
             f"{a['score']:.3f}", f"{a['raw_score']:.3f}"] for a in atoms if a["share"] >= 0.01]
    residual = ", ".join(f"layer {i + 1}: {s:.1%}"
                         for i, s in enumerate(summary["circuit"]["residual_share"]))
    parts += [
        "<h2>Circuit</h2>",
        "<p>The gauge-fixed A of each head written as a sum of block templates (β × template at "
        "(query block, key block)); 'a = b' lists readings equal modulo the softmax gauge. score: "
        "cosine of the gauge-fixed cell with its template; raw: the same for the raw weights. "
        f"Unexplained norm: {residual}.</p>",
        _table(["layer", "head", "cell", "β", "share", "score", "raw"], rows),
        "<h3>Weights, raw</h3>", _png(plot_circuit(model)),
        "<h3>Weights, gauge-fixed</h3>", _png(plot_circuit(model, gauge_fixed=True)),
    ]
    if summary["closest_constructions"]:
        parts += ["<h2>Closest constructions</h2>", _table(
            ["construction", "β", "pattern TV", "weight cos", "its cells found",
             "share of the weights its cells carry"],
            [[m["name"], f"{m['beta']:g}", f"{m['pattern_tv']:.3f}", f"{m['weight_cosine']:.2f}",
              f"{m['cells_found']:.0%}", f"{m['norm_share']:.0%}"]
             for m in summary["closest_constructions"]])]
    parts += ["<h2>Ablations</h2>", _table(
        ["ablation", "MSE before", "MSE after", "causal floor"],
        [[a["name"], f"{a['mse_before']:.3g}", f"{a['mse_after']:.3g}", f"{a['causal_floor']:.4g}"]
         for a in summary["ablations"]])]
    deps = dependency_map(model, batch.X[:4])
    if deps.causal_ok:
        verdict = "Every dependence of a read-out row on a later input row is exactly 0"
    else:
        verdict = f"Read-out rows depend on later input rows ({cfg.attention_dir} attention)"
    parts += ["<h2>Lemma 1 certificate</h2>", f"<p>{verdict}.</p>",
              _png(plot_dependency(deps.norms, deps.positions, cfg.layout))]
    parts += ["<h2>Attention on one sample</h2>", attention_views(model, batch, index=0)]
    return parts


def write_report(model: HookedDisentangledTransformer, summary: dict, batch: Batch,
                 path: str | Path, metrics: list[dict] | None = None,
                 title: str = "invperm-interp report") -> Path:
    """Write the report page for ``model`` (with ``summary`` from ``analysis.summary.summarize``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "\n".join(_sections(model, summary, batch, metrics))
    path.write_text(page(title, body), encoding="utf-8")
    return path
