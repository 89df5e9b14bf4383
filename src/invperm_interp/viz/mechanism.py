"""The report's headline and mechanism section: what ``analysis.analyze`` concluded, in words.

Renders a :class:`~invperm_interp.analysis.record.ModelAnalysis`; computes nothing. The headline
says first how the model does on the task (solved, at the causal floor, or not learned), then which
mechanism it implements by the library's one rule (a registry construction whose cells, run on
their own, get the rows right and recover the loss, with templates of the right sign), how
faithfully and how small the minimal circuit is; when no construction passes it names the closest
and the conditions it misses, and when the fitted atoms leave most of the weights unexplained it
says so plainly instead of presenting the atoms as a circuit.
"""

from __future__ import annotations

import html

from ..analysis.faithfulness import Faithfulness
from ..analysis.mechanism import Mechanism
from ..analysis.record import ModelAnalysis
from ..analysis.sweep_record import SweepRecord
from ..labels import excess_text, layer_name
from ..maths import constructions
from .curves import SOLVED_BELOW
from .html import table

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


def _description(name: str | None) -> str:
    spec = constructions.REGISTRY.get(name)
    return f" ({html.escape(spec.description)})" if spec is not None else ""


def _verdict(t: Faithfulness, mech: Mechanism) -> tuple[bool, bool, bool]:
    """The rule's three conditions on a tested construction: rows exact, loss recovered, and its
    templates' signs (every fitted β positive)."""
    c = t.circuit
    return (c.rows_exact >= mech.rule.rows,
            c.loss_recovered is not None and c.loss_recovered >= mech.rule.recovered,
            t.signs_agree)


def _misses(t: Faithfulness, mech: Mechanism) -> str:
    """``"rows exact 38.0% < 99%, a template sign"``: the conditions ``t`` fails, in words."""
    rows, loss, signs = _verdict(t, mech)
    out = []
    if not rows:
        out.append(f"rows exact {t.circuit.rows_exact:.1%} &lt; {mech.rule.rows:.0%}")
    if not loss:
        out.append(f"loss recovered {_pct(t.circuit.loss_recovered)} &lt; {mech.rule.recovered:.0%}")
    if not signs:
        wrong = sum(b <= 0 for b in t.template_betas)
        out.append(f"{wrong} of its {len(t.template_betas)} templates fitted with β ≤ 0 (the "
                   "weights point the other way)")
    return "; ".join(out)


def _task(analysis: ModelAnalysis) -> tuple[str, str]:
    """The first paragraph, on the task itself, and the headline's style: solved, at the causal
    floor, or not learned."""
    cfg, floor = analysis.model, analysis.causal_floor
    scored = (f"MSE {analysis.mse:.3g} on {analysis.n_samples} fresh samples, "
              f"{analysis.rows_exact:.1%} of rows exact")
    if analysis.mse < SOLVED_BELOW:
        return f"<b>The model solves the task</b>: {scored}.", "headline solved"
    if cfg.causal and floor > 0 and analysis.mse >= 0.98 * floor:
        return (f"<b>The model sits at the causal floor</b> ({excess_text(analysis.mse, floor)}): "
                "under the mask a read-out row cannot see the input rows it needs (Lemma 1), so no "
                "circuit can do better.", "headline")
    return (f"<b>The model has not learned the task</b>: {scored} (0.5 everywhere scores "
            f"{0.25 * cfg.d:g}).", "headline none")


def _named(analysis: ModelAnalysis) -> str:
    """The mechanism paragraph when the rule names a construction."""
    mech, f, m = analysis.mechanism, analysis.mechanism.faithfulness, analysis.mechanism.minimal
    spare = [c for c, s in zip(f.cells, f.minimality) if mech.rule.is_faithful(s)]
    if spare:
        needed = ("the circuit stays faithful without "
                  + (f"{len(spare)} of them, each removed alone: " if len(spare) > 1 else "")
                  + "; ".join(cell_name(c) for c in spare))
    else:
        worst = max((s.rows_exact for s in f.minimality), default=0.0)
        needed = f"each is needed: without any one the circuit gets at most {worst:.0%} of rows exact"
    shown = (mech.name if mech.name is not None else
             f"{mech.verdict} ({f.hypothesis}: an interval straddles the rule's thresholds)")
    also = ("" if not mech.also_faithful else " Also faithful, recovering less of the loss: "
            + ", ".join(html.escape(n) for n in mech.also_faithful) + ".")
    proof = " (provably smallest among the candidate cells)" if m.optimal else ""
    placed = mech.placement
    where = ("" if placed is None else
             f" It sits on layers {', '.join(str(layer + 1) for layer in placed.layers[:-1])} and "
             f"{placed.layers[-1] + 1}"
             + (", one layer's circuit spread over the sum of its heads" if placed.summed else "")
             + "; the test below removes every other layer's and head's weights.")
    return (f"<b>Mechanism: {html.escape(shown)}</b>"
            f"{_description(placed.construction if placed else mech.name)}.{where} Its {f.size_text} "
            f"alone, every other weight removed, get <b>{f.circuit.rows_exact:.1%}</b> of rows "
            f"exact and recover <b>{_pct(f.circuit.loss_recovered)}</b> of the loss (circuit MSE "
            f"{f.circuit.mse:.3g}, the model's {f.model.mse:.3g}; 0.5 everywhere scores "
            f"{f.baseline:g}), and every template's fitted β that matters is positive. Without them "
            f"the model's MSE is {f.without.mse:.3g}. Minimality: {needed}.{also} The smallest "
            f"faithful circuit found has <b>{m.size} cells</b>{proof}.")


def _unnamed(analysis: ModelAnalysis) -> str:
    """The mechanism paragraph when no construction passes the rule: the closest one and what it
    misses, then the minimal circuit, or that there is none."""
    mech, m = analysis.mechanism, analysis.mechanism.minimal
    if mech.empty is not None and mech.verdict == "untestable":
        return (f"<b>Untestable here.</b> The empty claim (no cell of the attention weights "
                f"matters) gets {mech.empty.circuit.rows_exact:.1%} of rows exact and recovers "
                f"{_pct(mech.empty.circuit.loss_recovered)} of the loss under this test, which does "
                f"not reject it: the test cannot tell a right claim from a wrong one on this "
                f"batch, so it names nothing.")
    sentences = ["<b>No registry construction explains this model.</b>"]
    if mech.tested:
        closest = mech.tested[0]  # the rule's order, the Mechanism table's first row
        sentences.append(
            f"The closest (the most loss recovered, the first row of the Mechanism table), "
            f"{html.escape(closest.hypothesis)}, run on its own gets "
            f"{closest.circuit.rows_exact:.1%} of rows exact and recovers "
            f"{_pct(closest.circuit.loss_recovered)} of the loss; it misses the rule on "
            f"{_misses(closest, mech)}.")
    else:
        sentences.append(html.escape(mech.untested[0].upper() + mech.untested[1:]) + "."
                         if mech.untested else
                         "No working construction has this layout, attention and read-out.")
    if m.faithful:
        sentences.append(
            f"The smallest faithful circuit found has <b>{m.size} cells</b> "
            f"({m.score.rows_exact:.1%} of rows exact, {_pct(m.score.loss_recovered)} of the loss "
            f"recovered, {m.weight_share:.0%} of the gauge-fixed weights): listed below.")
    elif m.size == 0:
        sentences.append("The fitted atoms occupy no cell, so there is no circuit to run on its own.")
    else:
        sentences.append(
            f"Even all {m.size} cells the fitted atoms occupy, run on their own, are not faithful "
            f"({m.score.rows_exact:.1%} of rows exact; {_recovered(m.score.loss_recovered)}).")
    return " ".join(sentences)


def _unexplained(analysis: ModelAnalysis) -> str:
    """A caveat when the fitted atoms leave most of a layer's weights unexplained ("" if not)."""
    unexplained = analysis.circuit.residual_share
    if not unexplained or max(unexplained) <= UNEXPLAINED:
        return ""
    scores = [a.score for a in analysis.circuit.atoms if a.share >= 0.01]
    if scores:
        fit = f"its atoms match their templates with cosine {min(scores):.2f}–{max(scores):.2f}"
        table_note = "; the circuit table below is the best sparse fit, not a mechanism"
    else:
        fit, table_note = "no atom holds 1% of a layer's weights", ""
    low, high = min(unexplained), max(unexplained)
    share = (f"{high:.0%} of every layer's" if f"{low:.0%}" == f"{high:.0%}" else
             f"{low:.0%}–{high:.0%} of each layer's")
    return (f"<b>No template explains the weights:</b> {fit}, and {share} gauge-fixed weights are "
            f"unexplained{table_note}.")


def headline(analysis: ModelAnalysis) -> str:
    """The page's first section: how the model does on the task, then the mechanism by the rule
    (its faithfulness and minimal circuit, or the closest construction and what it misses), then
    a caveat when templates leave most of the weights unexplained."""
    task, cls = _task(analysis)
    mech = _named(analysis) if analysis.mechanism.faithfulness is not None else _unnamed(analysis)
    caveat = _unexplained(analysis)
    body = f"<p>{task}</p><p>{mech}</p>" + (f'<p class="caveat">{caveat}</p>' if caveat else "")
    return f'<h2>Headline</h2><div class="{cls}">{body}</div>'


def mechanism_section(analysis: ModelAnalysis) -> str:
    """Every fitting construction run on its own, the named one's cells one by one, and the
    minimal circuit."""
    mech, f, m = analysis.mechanism, analysis.mechanism.faithfulness, analysis.mechanism.minimal
    parts = ["<h2>Mechanism</h2>"]
    if not mech.tested:
        parts.append(f"<p>{html.escape(mech.untested or 'No working construction fits this model.')}</p>")
    else:
        mark = lambda ok: "✓" if ok else "✗"  # noqa: E731
        rows = []
        for t in mech.tested:
            rows_ok, loss_ok, signs_ok = _verdict(t, mech)
            wrong = sum(b <= 0 for b in t.template_betas)
            verdict = ("named" if t.hypothesis == mech.name else "passes (another is named)"
                       if rows_ok and loss_ok and signs_ok else "fails")
            rows.append([
                t.hypothesis, f"{t.n_cells}" + ("" if t.n_cells == t.n_atoms else f" ({t.n_atoms})"),
                f"{t.circuit.rows_exact:.1%} {mark(rows_ok)}",
                f"{_pct(t.circuit.loss_recovered)} {mark(loss_ok)}",
                ("all β > 0 ✓" if signs_ok else f"{wrong} of {len(t.template_betas)} β ≤ 0 ✗"),
                f"{t.circuit.mse:.3g}", "not run" if t.without is None else f"{t.without.mse:.3g}",
                verdict])
        parts.append(table(
            ["construction", "cells (atoms)", f"rows exact alone (≥ {mech.rule.rows:.0%})",
             f"loss recovered (≥ {mech.rule.recovered:.0%})", "template signs", "circuit MSE",
             "model MSE without its cells", "rule"],
            rows,
            "Each working construction with this layout, attention and read-out (beyond two layers "
            "of one head: at its best-weighted placements on two layers' heads, docs/shapes.md), "
            "tested by running "
            "its cells alone: the gauge-fixed <code>A</code> kept only in its cells (at the model's "
            "own fitted β) and <code>W_U</code> only on its read-out block, everything else zeroed. "
            f"<b>The rule</b> names a construction when all three conditions hold: at least "
            f"{mech.rule.rows:.0%} of rows exact, {mech.rule.recovered:.0%} of the loss recovered, "
            "against the baseline of everything ablated (0.5 everywhere, MSE d/4), and every template of its "
            "cells fitted to the weights with a positive β (a cell test alone cannot tell "
            "<code>I</code> from <code>−I</code>), each judged on its 95% interval (borderline when "
            "one straddles a threshold); of those that pass, the one recovering the most loss is "
            "named and the others listed as also faithful. Rows in the rule's order: those that "
            "pass, then the borderline, then the rest, each by the most loss recovered. "
            "<b>Model MSE without its cells</b>: the full "
            "model with them removed (completeness: high means the model needs them); beyond two "
            "layers of one head it is run only for the placements that pass or straddle and for "
            "each construction's best placement (the others: not run).",
            attrs=' class="mechanism"'))
    if f is not None:
        parts.append(table(
            ["layer", "cell", "fitted β", "circuit MSE without it", "rows exact without it"],
            [[layer_name(c.layer) + (f" head {c.head}" if c.head else ""),
              f"{c.label} at ({c.query}, {c.key})", f"{b:.3g}", f"{s.mse:.3g}",
              f"{s.rows_exact:.1%}"] for c, b, s in zip(f.cells, f.betas, f.minimality)],
            f"Minimality of {html.escape(str(mech.answer))}: its circuit with one cell removed at a time "
            "(a needed cell drops the rows exact far below the rule's threshold)."))
    if not m.cells:
        parts.append("<p>Minimal circuit: none; the fitted atoms occupy no cell.</p>")
        return "".join(parts)
    parts.append(table(
        ["layer", "head", "cell"],
        [[layer_name(c.layer), c.head, f"{c.label} at ({c.query}, {c.key})"]
         for c in sorted(m.cells, key=lambda c: (c.layer, c.head))],  # by layer, then head
        (("Minimal circuit: provably the smallest set of candidate cells whose circuit-only model "
          "is faithful (every smaller set was tried)" if m.optimal else
          "Minimal circuit: the smallest set of cells found whose circuit-only model is faithful "
          "(greedy by effect, then pruned; the exact search could not prove it smallest"
          + (f": {m.proof}, a gap of at most {m.gap} cells" if m.proof else "") + ")")
         if m.faithful else
         "No faithful circuit was found: these are all the cells the fitted atoms occupy, run on "
         "their own")
        + f"; reads {html.escape(', '.join(m.read) or '—')}; {m.score.rows_exact:.1%} of rows exact, "
        f"{_recovered(m.score.loss_recovered)}; {m.weight_share:.0%} of the gauge-fixed weights."))
    return "".join(parts)


def sweep_verdict_section(record: SweepRecord | None) -> str:
    """What ``invperm sweep`` recorded for this run (its ``mechanism.json``): the rule's name on
    its own, larger batches, on more batches and under the other ablation styles; nothing without
    a record."""
    if record is None:
        return ""

    def name(value) -> str:  # an Answer: a tie is the set of names the batch cannot rank
        tie = " (a tie: this batch cannot rank them)" if value.tied else ""
        return f"<b>{html.escape(str(value))}</b>{tie}"

    also = record.mechanism.also_faithful
    lines = [f"the rule names {name(record.answer)}"
             + (f" (also faithful: {html.escape(', '.join(also))})" if also else "")
             + f" on {record.samples:,} fresh samples (seed {record.seed})"]
    if record.batches > 1:
        lines.append(f"on {record.batches} batches: " + ", ".join(map(name, record.names_by_batch)))
    for style, other in record.under.items():
        lines.append(f"under {style} ablation of the cells outside the circuit: " + name(other))
    m = record.mechanism.minimal
    proof = f", {m.proof}" if m.proof else ""
    lines.append(f"minimal circuit {m.size} cells ({'faithful' if m.faithful else 'not faithful'}"
                 f"{proof})")
    return ("<h3>The sweep's verdict</h3><p class='meta'>The sweep that trained this run analysed "
            "it too (<code>mechanism.json</code>): " + "; ".join(lines) + ". The tables above are "
            "this page's own analysis, on its own batch.</p>")
