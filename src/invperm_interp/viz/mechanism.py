"""The report's headline and mechanism section: what ``analysis.analyze`` concluded, in words.

Renders a :class:`~invperm_interp.analysis.record.ModelAnalysis`; computes nothing. The headline
says which mechanism the model implements by the library's one rule (a registry construction whose
cells, run on their own, get the rows right), how faithfully, how small the minimal circuit is and
what that means; when no construction passes, or when the fitted atoms leave most of the weights
unexplained, it says so plainly instead of presenting the atoms as a circuit.
"""

from __future__ import annotations

import html

from ..analysis.mechanism import is_faithful
from ..analysis.record import ModelAnalysis
from ..labels import layer_name
from ..maths import constructions
from .html import table
from .training import excess_text

# A circuit whose atoms leave more than this share of a layer's gauge-fixed weights unexplained is
# not presented as explained by templates.
UNEXPLAINED = 0.5


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def _recovered(x: float | None) -> str:
    """``"94% of the loss recovered"``, or why there is none to recover."""
    if x is None:
        return "no loss to recover: the model does no better than 0.5 everywhere"
    return f"{x:.0%} of the loss recovered"


def cell_name(cell) -> str:
    """``"layer 1 (blocks.0): I at (pos.Y, pos.P)"`` for a cell ``(layer, head, query, key, label)``
    (the head is added when it is not 0)."""
    layer, head, query, key, label = cell
    return f"{layer_name(layer)}{f' head {head}' if head else ''}: {label} at ({query}, {key})"


def _description(name: str) -> str:
    spec = constructions.REGISTRY.get(name)
    return f" ({html.escape(spec.description)})" if spec is not None else ""


def headline(analysis: ModelAnalysis) -> str:
    """The page's first section: the mechanism, its faithfulness and minimal circuit, in words."""
    mech, f, m = analysis.mechanism, analysis.mechanism.faithfulness, analysis.mechanism.minimal
    sentences, cls = [], "headline"
    if f is not None:
        spare = [c for c, s in zip(f.cells, f.minimality) if is_faithful(s, mech.rows, mech.recovered)]
        if spare:
            needed = ("the circuit stays faithful without "
                      + (f"{len(spare)} of them, each removed alone: " if len(spare) > 1 else "")
                      + "; ".join(cell_name(c) for c in spare))
        else:
            worst = max((s.rows_exact for s in f.minimality), default=0.0)
            needed = (f"each is needed: without any one the circuit gets at most {worst:.0%} of rows "
                      "exact")
        shown = (mech.name if mech.name != "borderline" else
                 f"borderline ({f.hypothesis}: an interval straddles the rule's thresholds)")
        sentences.append(
            f"<b>Mechanism: {html.escape(shown)}</b>{_description(mech.name)}. Its {f.size_text} "
            f"alone, every other weight removed, get <b>{f.circuit.rows_exact:.1%}</b> of rows "
            f"exact and recover <b>{_pct(f.circuit.loss_recovered)}</b> of the loss (circuit MSE "
            f"{f.circuit.mse:.3g}, the model's {f.model.mse:.3g}; 0.5 everywhere scores "
            f"{f.baseline:g}). Without them the model's MSE is {f.without.mse:.3g}. Minimality: "
            f"{needed}.")
        if mech.also_faithful:
            sentences.append("Also faithful, recovering less of the loss: "
                             + ", ".join(html.escape(n) for n in mech.also_faithful) + ".")
        proof = " (provably smallest among the candidate cells)" if m.optimal else ""
        sentences.append(f"The smallest faithful circuit found has <b>{m.size} cells</b>{proof}.")
    else:
        cls = "headline none"
        best = mech.tested[0] if mech.tested else None
        sentences.append("<b>No registry construction explains this model.</b>")
        if best is not None:
            sentences.append(
                f"The best, {html.escape(best.hypothesis)}, run on its own gets "
                f"{best.circuit.rows_exact:.1%} of rows exact and recovers "
                f"{_pct(best.circuit.loss_recovered)} of the loss (the rule asks {mech.rows:.0%} and "
                f"{mech.recovered:.0%}).")
        else:
            sentences.append("No working construction has this layout, attention and read-out.")
        if m.faithful:
            sentences.append(
                f"The smallest faithful circuit found has <b>{m.size} cells</b> "
                f"({m.score.rows_exact:.1%} of rows exact, {_pct(m.score.loss_recovered)} of the loss "
                f"recovered, {m.weight_share:.0%} of the gauge-fixed weights): listed below.")
        else:
            sentences.append(
                f"Even all {m.size} cells the fitted atoms occupy, run on their own, are not faithful "
                f"({m.score.rows_exact:.1%} of rows exact; {_recovered(m.score.loss_recovered)}).")
    paragraphs = [" ".join(sentences)]  # the mechanism; the floor and the fit get their own
    unexplained = analysis.circuit.residual_share
    if unexplained and max(unexplained) > UNEXPLAINED:
        cls = "headline none"
        scores = [a.score for a in analysis.circuit.atoms if a.share >= 0.01]
        fit = (f"its atoms match their templates with cosine {min(scores):.2f}–{max(scores):.2f}"
               if scores else "no atom holds 1% of a layer")
        paragraphs.append(
            f"<b>No template explains the weights:</b> {fit}, and {min(unexplained):.0%}–"
            f"{max(unexplained):.0%} of each layer's gauge-fixed weights are unexplained; the circuit "
            "table below is the best sparse fit, not a mechanism.")
    floor, cfg = analysis.causal_floor, analysis.model
    if cfg.causal and floor > 0 and analysis.mse >= 0.98 * floor:  # the first thing to know
        paragraphs.insert(0, (
            f"<b>The model sits at the causal floor</b> ({excess_text(analysis.mse, floor)}): under "
            "the mask a read-out row cannot see the input rows it needs (Lemma 1), so no circuit "
            "can do better."))
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return f'<h2>Headline</h2><div class="{cls}">{body}</div>'


def mechanism_section(analysis: ModelAnalysis) -> str:
    """Every fitting construction run on its own, the named one's cells one by one, and the
    minimal circuit."""
    mech, f, m = analysis.mechanism, analysis.mechanism.faithfulness, analysis.mechanism.minimal
    parts = ["<h2>Mechanism</h2>"]
    if mech.tested:
        parts.append(table(
            ["construction", "cells (atoms)", "rows exact alone", "loss recovered", "circuit MSE",
             "model MSE without its cells", "faithful"],
            [[t.hypothesis, f"{t.n_cells}" + ("" if t.n_cells == t.n_atoms else f" ({t.n_atoms})"),
              f"{t.circuit.rows_exact:.1%}", _pct(t.circuit.loss_recovered),
              f"{t.circuit.mse:.3g}", f"{t.without.mse:.3g}",
              "yes" if is_faithful(t.circuit, mech.rows, mech.recovered) else "no"]
             for t in mech.tested],
            "Each working construction with this layout, attention and read-out, tested by running "
            "its cells alone: the gauge-fixed <code>A</code> kept only in its cells (at the model's "
            "own fitted β) and <code>W_U</code> only on its read-out block, everything else zeroed. "
            f"<b>Faithful</b>: at least {mech.rows:.0%} of rows exact and {mech.recovered:.0%} of the "
            "loss recovered, against the baseline of everything ablated (0.5 everywhere, MSE d/4); "
            "the fewest atoms win (a cell holding <code>1 − I</code> is two atoms). <b>Model MSE "
            "without its cells</b>: the full model with them removed (completeness: high means the "
            "model needs them)."))
    if f is not None:
        parts.append(table(
            ["layer", "cell", "fitted β", "circuit MSE without it", "rows exact without it"],
            [[layer_name(c[0]), f"{c[4]} at ({c[2]}, {c[3]})", f"{b:.3g}", f"{s.mse:.3g}",
              f"{s.rows_exact:.1%}"] for c, b, s in zip(f.cells, f.betas, f.minimality)],
            f"Minimality of {html.escape(mech.name)}: its circuit with one cell removed at a time "
            "(a needed cell drops the rows exact far below the rule's threshold)."))
    parts.append(table(
        ["layer", "head", "cell"],
        [[layer_name(c[0]), c[1], f"{c[4]} at ({c[2]}, {c[3]})"] for c in m.cells],
        ("Minimal circuit: the smallest set of cells found (greedy by effect, then pruned; each "
         "faithful construction pruned too) whose circuit-only model is faithful" if m.faithful else
         "No faithful circuit was found: these are all the cells the fitted atoms occupy, run on "
         "their own")
        + f"; reads {html.escape(', '.join(m.read) or '—')}; {m.score.rows_exact:.1%} of rows exact, "
        f"{_recovered(m.score.loss_recovered)}; {m.weight_share:.0%} of the gauge-fixed weights."))
    return "".join(parts)
