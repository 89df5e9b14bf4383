"""One model's whole analysis as plain data: circuit, per-cell templates, closest construction,
ablations and the gauge check. ``invperm analyze`` prints it; the HTML report renders it."""

from __future__ import annotations

import math

from ..model import HookedDisentangledTransformer
from ..task import Batch
from .ablate import standard_ablations
from .compare import closest_construction
from .gauge import gauge_check
from .templates import explain, match_templates


def summarize(model: HookedDisentangledTransformer, batch: Batch, source: str = "") -> dict:
    """Everything ``analysis.json`` holds, computed on ``batch`` (JSON-ready; no NaN).

    Shares and cosines square the weights: weights whose squared norm overflows float64 (a
    construction at beta ~1e155 or more) are refused rather than reported as NaN.
    """
    square = sum(float(p.detach().double().pow(2).sum()) for p in model.parameters())
    if not math.isfinite(square):
        largest = max(float(p.detach().abs().max()) for p in model.parameters())
        raise ValueError(f"the model's weights are too large to analyze (largest |weight| "
                         f"{largest:.3g}; their squared norm overflows float64): rescale them, or "
                         f"for a construction pass beta <= 1e150 (its patterns are exact from "
                         f"beta ~ 100 on)")
    circuit = explain(model)
    ablations = standard_ablations(model, batch)
    return {
        "source": source,
        "model": model.cfg.to_dict(),
        "n_samples": len(batch),
        "mse": ablations[0].mse_before,
        "causal_floor": ablations[0].causal_floor,
        "gauge_check": gauge_check(model, batch.X),  # max pattern change from gauge-fixing A
        "circuit": circuit.to_dict(),
        "cells": [row.to_dict() for row in match_templates(model)],
        "closest_constructions": [vars(m) for m in closest_construction(model, batch)],
        "ablations": [result.to_dict() for result in ablations],
    }


def atom_label(atom: dict) -> str:
    """``"I at (pos.P, x)"`` (plus gauge twins) from an atom's dict."""
    twins = "".join(f" = {t} at ({q}, {k})" for q, k, t in atom.get("twins", ()))
    return f"{atom['label']} at ({atom['query']}, {atom['key']}){twins}"


def headline(summary: dict, min_share: float = 0.01) -> str:
    """The human-readable table ``invperm analyze`` prints."""
    cfg = summary["model"]
    lines = [
        f"{summary['source']}: {cfg['attention_dir']}, reads {cfg['readout']} rows; "
        f"MSE {summary['mse']:.3g} (causal floor {summary['causal_floor']:.3g})",
        f"gauge: attention patterns of A and gauge_fix(A) differ by {summary['gauge_check']:.2g} "
        f"at most on {summary['n_samples']} samples",
        "",
        "circuit: atoms of gauge_fix(A) holding >= 1% of their layer (layer: the note's, from 1; "
        "score: gauge-fixed cosine; raw: the raw cell's)",
        f"  {'layer':5s}  {'cell':34s} {'beta':>8s} {'share':>6s} {'score':>6s} {'raw':>6s}",
    ]
    atoms = sorted(summary["circuit"]["atoms"], key=lambda a: (a["layer"], a["head"], -a["share"]))
    for atom in atoms:
        if atom["share"] >= min_share:
            cell = f"{atom['label']} at ({atom['query']}, {atom['key']})"
            twins = atom_label(atom)[len(cell):]
            lines.append(f"  {atom['layer'] + 1:<5d}  {cell:34s} {abs(atom['beta']):8.3g} "
                         f"{atom['share']:6.1%} {atom['score']:6.3f} {atom['raw_score']:6.3f}{twins}")
    left = ", ".join(f"layer {i + 1} {s:.1%}" for i, s in enumerate(summary["circuit"]["residual_share"]))
    lines.append(f"  unexplained: {left}; {len(atoms)} atoms in all")
    if summary["closest_constructions"]:
        lines += ["", "closest constructions (attention patterns, each at its best beta)"]
        for m in summary["closest_constructions"][:3]:
            lines.append(f"  {m['name']:22s} beta {m['beta']:<6g} pattern TV {m['pattern_tv']:.3f}  "
                         f"weight cos {m['weight_cosine']:.2f}  its cells found {m['cells_found']:.0%}, "
                         f"carrying {m['norm_share']:.0%} of the weights")
    lines += ["", "ablations"] + [f"  {a['text']}" for a in summary["ablations"]]
    return "\n".join(lines)
