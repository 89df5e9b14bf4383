"""The HTML report of one model: a page a researcher reads top to bottom in a minute.

Order: what was run (once), the headline (the mechanism and what it means, ``viz.mechanism``), the
numbers (MSE against the causal floor, accuracies), the training curve, the mechanism over training
(when the run has a timeline), the mechanism tests, the
circuit (table with captions, gauge-fixed weights, raw weights folded away), closest constructions
by attention patterns, ablations, the Lemma 1 certificate and the attention patterns of one sample.
Layers are named one way everywhere (``invperm_interp.labels``).

The page only renders: the numbers, the accuracies and the attention on sample 0 come from the
analysis record (``ModelAnalysis``) and the run's metrics; the model is read for its weights only
(a record written before it carried accuracies and patterns falls back to running it). Figures
are inline SVG with alt text; the circuitsvis bundle is inlined (one self-contained file) unless
``bundle`` names a shared copy (a directory of reports, see ``viz.index``).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..analysis.ablate import AblationResult
from ..analysis.record import ModelAnalysis, atom_label
from ..analysis.sweep_record import SweepRecord
from ..analysis.timeline import Timeline
from ..analysis.verdict import UNNAMED
from ..config import TrainConfig
from ..labels import excess_text, layer_name, name_streams
from ..model.disentangled import DisentangledModel
from ..runs.directory import RunDir
from ..runs.evaluation import Evaluation
from ..task import Batch
from ..training.metrics import evaluate
from .attention import attention_views
from .curves import accuracy_chart, training_caption, training_chart
from .html import figure, table
from .mechanism import headline, mechanism_section, sweep_verdict_section
from .page import page
from .weight_maps import certificate_map, head_maps, unembed_map

__all__ = ["write_report", "report_html", "write_behaviour_report"]

def _esc(value) -> str:
    return html.escape(str(value))


def _setup(model: DisentangledModel, train_cfg: TrainConfig | None,
           metrics: list[Evaluation] | None) -> str:
    """What was run, said once: the model and, for a trained run, how it was trained."""
    cfg = model.cfg
    model_text = (f"{cfg.attention_dir} attention on {_esc(cfg.layout)}, "
                  f"{cfg.n_layers} layers, heads per layer {list(cfg.heads)}, reads the "
                  f"{cfg.readout} rows; {cfg.dtype}")
    parts = [f"<b>Model</b>: {model_text}."]
    if train_cfg is not None:
        t = train_cfg.resolved()
        steps = metrics[-1].step if metrics else t.steps
        schedule = t.schedule + (f" over {t.schedule_steps} steps" if t.schedule == "cosine" else "")
        parts.append(f"<b>Training</b>: {steps} steps of {t.optimizer} (recipe {t.recipe}), "
                     f"lr {t.lr:g} ({schedule}), batch size {t.batch_size}, seed {t.seed}, "
                     f"evaluated every {t.eval_every} steps on a fixed batch of {t.eval_size}.")
    elif metrics:
        parts.append(f"<b>Training</b>: {metrics[-1].step} steps (no config.json given).")
    return f'<p class="meta">{"<br>".join(parts)}</p>'


def _through_map(result: ModelAnalysis) -> str:
    """For a standard model: that it is read through its exact map, and each head's ``W_OV``."""
    if result.through_map is None:
        return ""
    std = result.through_map["model"]
    rows = [[f"layer {layer + 1}", h, rank, ", ".join(f"{v:.3g}" for v in values[:8])
             + (" …" if len(values) > 8 else "")]
            for layer, (ranks, spectra) in enumerate(zip(result.through_map["ov_rank"],
                                                         result.through_map["ov_spectra"]))
            for h, (rank, values) in enumerate(zip(ranks, spectra))]
    text = (f"<p><b>A standard transformer</b> (residual width d_model {std['d_model']}, heads of "
            f"width d_head {std['d_head']}, no LayerNorm, no MLPs), analysed exactly through its "
            f"map to the disentangled model (<code>docs/standard.md</code>): the stream after "
            f"layer l is h<sup>l</sup> M<sub>l</sub>, each head's scores are h A h<sup>T</sup> with "
            f"A = M W<sub>Q</sub> W<sub>K</sub><sup>T</sup> M<sup>T</sup> / &radic;d_head. Every "
            f"weight, cell and circuit below is of the disentangled model computing the same "
            f"function.</p>")
    return text + table(["layer", "head", "rank of W_OV", "singular values of W_OV = W_V W_O"],
                        rows, caption=f"W_OV per head: rank at most d_head = {std['d_head']}.")


def _results(model: DisentangledModel, result: ModelAnalysis, batch: Batch,
             metrics: list[Evaluation] | None, train_cfg: TrainConfig | None) -> str:
    """The numbers: MSE against the floor on the eval batch and on the analysis batch, accuracies."""
    floor = result.causal_floor
    causal = model.cfg.causal
    rows = []
    if metrics:
        last = metrics[-1]
        size = f"{train_cfg.eval_size} " if train_cfg is not None else ""
        at = last.causal_floor if last.causal_floor is not None else floor
        rows.append([f"training's eval batch ({size}samples), step {last.step}",
                     excess_text(last.mse, at if causal else None),
                     *(f"{a:.2%}" if a is not None else "—"
                       for a in (last.entry_acc, last.row_acc, last.sample_acc))])
    acc = result.accuracy or evaluate(model, batch.to(model.device, model.cfg.torch_dtype))._asdict()
    rows.append([f"this analysis's fresh batch ({result.n_samples} samples)",
                 excess_text(result.mse, floor if causal else None),
                 *(f"{acc[k]:.2%}" for k in ("entry_acc", "row_acc", "sample_acc"))])
    binds = ("" if causal else " (this model is bidirectional: the floor is its causal twin's, "
             "which this model can go below)")
    caption = (f"MSE is the note's loss (squared error summed over columns, averaged over rows); "
               f"0.5 everywhere scores {0.25 * model.cfg.d:.4g}. The causal floor {floor:.6g} is the "
               f"best any causally masked model with this layout and read-out can do{binds}. "
               "Exact: entries, rows, whole Y right after rounding.")
    note = ""
    if metrics:
        note = ("<p class='meta'>The two MSEs differ because they are measured on different samples: "
                "the curve's last point on the fixed batch the run evaluated on throughout, the "
                "analysis below on a fresh batch drawn for it.</p>")
    return "<h2>Results</h2>" + table(["measured on", "MSE", "entries exact", "rows exact",
                                       "samples exact"], rows, caption) + note


def _circuit(model: DisentangledModel, result: ModelAnalysis) -> str:
    atoms = sorted(result.circuit.atoms, key=lambda a: (a.layer, a.head, -a.share))
    rows = [[layer_name(a.layer), a.head, atom_label(a), f"{a.scale:.3g}", f"{a.share:.1%}",
             f"{a.score:.3f}", f"{a.raw_score:.3f}"] for a in atoms if a.share >= 0.01]
    residual = "; ".join(f"{layer_name(i)}: {s:.1%}"
                         for i, s in enumerate(result.circuit.residual_share))
    caption = (
        "Each head's gauge-fixed <code>A</code> written as a sum of placed templates (atoms): "
        "<b>cell</b> is template at (query block, key block), 'a = b' lists readings equal modulo "
        "the softmax gauge; <b>β</b> the template's scale (sharper attention when larger; the "
        "constructions use 100); <b>share</b> of the layer's squared gauge-fixed weights this atom "
        "carries (atoms under 1% not listed); <b>score</b> cosine of the gauge-fixed cell with its "
        "template (1 = exactly the template); <b>raw</b> the same for the raw weights (low raw with "
        f"high score: the gauge hid it). Unexplained: {residual}.")
    heads = [(layer, head) for layer, n in enumerate(model.cfg.heads) for head in range(n)]
    gauge_figs, raw_figs = [], []
    for layer, head in heads:
        name = f"{layer_name(layer)} head {head}"
        texts = [(f"Heatmap of the gauge-fixed A of {name}: query blocks in rows, key blocks in "
                  "columns, red positive, blue negative.",
                  f"{layer_name(layer)}, head {head}: gauge-fixed <code>A</code>, query blocks in "
                  "rows, key blocks in columns (red positive, blue negative)"),
                 (f"Heatmap of the raw A of {name}.",
                  f"{layer_name(layer)}, head {head}: raw <code>A</code>, as trained")]
        drawn = [figure(fig, alt, caption)
                 for fig, (alt, caption) in zip(head_maps(model, layer, head), texts)]
        gauge_figs.append(drawn[0])
        raw_figs.append(drawn[1])
    gauge_figs, raw_figs = "".join(gauge_figs), "".join(raw_figs)
    w_u = figure(unembed_map(model), "Heatmap of W_U: which blocks of the final stream are "
                 "copied into the output, one column per output column.",
                 "<code>W_U</code>: the blocks of the final stream copied into the output, one "
                 "column per output column")
    atoms_table = (table(["layer", "head", "cell", "β", "share", "score", "raw"], rows, caption)
                   if rows else f"<p>No atom holds 1% of a layer's weights. Unexplained: {residual}.</p>")
    return (
        "<h2>Circuit</h2>" + atoms_table
        + "<h3>Weights</h3><p class='meta'>The gauge-fixed <code>A</code> of each head (what the "
          "table reads) and <code>W_U</code> (untouched by the gauge, drawn once).</p>"
        + f'<div class="figs">{gauge_figs}{w_u}</div>'
        + "<details><summary>Raw weights, before gauge fixing</summary>"
          "<p class='meta'>Softmax ignores adding the same vector to every key score of a query, so "
          "raw weights carry an invisible gauge component; these are the weights as trained.</p>"
        + f'<div class="figs">{raw_figs}</div></details>')


def _constructions(result: ModelAnalysis) -> str:
    matches = result.closest
    if not matches:
        return ""
    caption = ("Registry constructions with this model's attention and read-out, each at the β "
               "closest to the model, best first. <b>pattern TV</b>: mean total-variation distance "
               "between the two models' attention patterns (0 = identical, 1 = disjoint); "
               "<b>weight cos</b>: cosine of the gauge-fixed weights (1 = same up to scale); "
               "<b>its cells found</b>: share of the construction's cells among this model's atoms; "
               "<b>weight share</b>: share of this model's gauge-fixed weights those cells carry.")
    rows = [[m.name, f"{m.beta:g}", f"{m.pattern_tv:.3f}", f"{m.weight_cosine:.2f}",
             f"{m.cells_found:.0%}", f"{m.norm_share:.0%}"] for m in matches]
    return "<h2>Closest constructions by attention patterns</h2>" + table(
        ["construction", "β", "pattern TV", "weight cos", "its cells found", "weight share"],
        rows, caption)


def _ablations(model: DisentangledModel, result: ModelAnalysis) -> str:
    ablations = result.ablations
    if not ablations:
        return ""
    L = model.cfg.n_layers
    before, floor = ablations[0].mse_before, ablations[0].causal_floor
    causal = model.cfg.causal
    caption = (f"Each row runs the model once with one intervention, on the analysis batch. Before any "
               f"ablation the MSE is <b>{before:.4g}</b>; "
               + (f"the causal floor is <b>{floor:.4g}</b>. " if causal else
                  f"the model is bidirectional, so the causal floor ({floor:.4g}) bounds only the "
                  f"mask ablation, which puts it under the causal mask. ")
               + "An ablation that raises the MSE far above where it started removed something the "
               "model needs; a change of +0 or below removed nothing it needs"
               + (f", and an MSE at the floor ({floor:.4g}) is what the best model that cannot see "
                  f"the removed rows reaches." if floor > 0 and causal else "."))
    rows = [[name_streams(a.name, L), _what_it_does(a, L), f"{a.mse_after:.4g}",
             f"{a.change:+.3g}"] for a in ablations]
    return "<h2>Ablations</h2>" + table(["ablation", "what it does", "MSE after", "change"], rows,
                                        caption)


def _what_it_does(ablation: AblationResult, n_layers: int) -> str:
    """An ablation's description, without restating the block and stream its name already gives."""
    if ablation.block is not None:
        return f"{ablation.how} it at every position (hook {ablation.hook})"
    return name_streams(ablation.description, n_layers)


def _certificate(model: DisentangledModel, result: ModelAnalysis) -> str:
    cfg, lemma1 = model.cfg, result.lemma1
    if lemma1.causal_ok:
        verdict = "Every dependence of a read-out row on a later input row is exactly 0"
    else:
        verdict = (f"Read-out rows depend on later input rows, up to {lemma1.max_later:.3g} "
                   f"({cfg.attention_dir} attention)")
    fig = certificate_map(torch.tensor(lemma1.norms), lemma1.positions, cfg.layout)
    return ("<h2>Lemma 1 certificate</h2>" + f"<p>{verdict}.</p>" + figure(
        fig, f"Heatmap of how strongly each read-out row depends on each input row; {verdict}.",
        "Largest Jacobian norm over 4 samples of each read-out row (rows) with respect to each "
        "input row (columns). Hatched: exactly zero, as Lemma 1 requires for every later row under "
        "a causal mask."))


def _attention(model: DisentangledModel, batch: Batch, patterns) -> str:
    return ("<h2>Attention on one sample</h2>"
            "<p class='meta'>Each head's attention pattern on sample 0 of the analysis batch: query "
            "(destination) rows down, key (source) rows across, darker = more attention (hover for "
            "values); grey cells are masked. Token labels: <code>P3→e7</code> is P row 3 (the one-hot "
            "e_7), <code>Y3</code> row 3 of Y_P, <code>S3</code> a scratch row; "
            f"<code>▶</code> marks the {model.cfg.readout} rows the model reads out.</p>"
            + attention_views(model, batch, index=0, patterns=patterns))


def _sparse(timeline) -> str:
    """A sentence when the run's checkpoints are too sparse to place the loss's fall
    (``analysis.timeline.sparse_fall``), else ""."""
    from ..analysis.timeline import sparse_fall

    fall = sparse_fall(timeline)
    if fall is None:
        return ""
    where = ("before the first checkpoint" if fall.checkpoint_before is None else
             f"between checkpoints at steps {fall.checkpoint_before} and {fall.checkpoint_after}")
    return (f" The loss fell between steps {fall.after} and {fall.by}, {where}, so these steps "
            "cannot place when the circuit formed: train with <code>--checkpoint-dense-every 25</code>"
            + ("" if fall.checkpoint_before is None else
               f" or run <code>invperm timeline RUN --refine {fall.checkpoint_before}:{fall.by}</code>")
            + ".")


def _over_training(timeline, checkpoints: int) -> str:
    """The mechanism over training (``invperm timeline RUN``'s record), or how to make it when the
    run kept checkpoints; nothing for a model without any."""
    if timeline is None:
        if not checkpoints:
            return ""
        return ("<h2>Over training</h2><p>This run kept " + f"{checkpoints} checkpoints: "
                "<code>invperm timeline RUN</code> analyses each against the final circuit, and "
                "this page then shows when the circuit formed.</p>")
    from .timeline import plot_timeline

    first, since = timeline.first_faithful, timeline.faithful_since
    what = (f"{_esc(timeline.final_mechanism)}'s cells" if timeline.final_mechanism
            not in UNNAMED else "the minimal circuit")
    when = ("never faithful at a checkpoint" if first is None else
            f"first faithful at step {first}" + ("" if since in (None, first)
                                                 else f", and from step {since} on"))
    named = timeline.first_named()
    text = (f"<p>The final circuit ({what}, {len(timeline.cells)} cells) run alone at each of "
            f"{len(timeline.steps)} checkpoints: {when}; the rule first names "
            f"{_esc(timeline.final_mechanism)} at "
            + ("no checkpoint" if named is None else f"step {named}") + "."
            + _sparse(timeline) + "</p>")
    return ("<h2>Over training</h2>" + text + figure(
        plot_timeline(timeline), "The mechanism over training: loss, rows exact, each cell's "
        "fitted β and effect against the step.",
        "Green: checkpoints where the final circuit alone is faithful (dashed: the first)."))


@dataclass(frozen=True)
class ReportContext:
    """What a report page shows beside the analysis: its ``title``; for a trained run its eval
    records (``metrics``) and ``train_cfg``, its ``analysis.timeline.Timeline`` (the section "Over
    training") or else how many ``checkpoints`` it kept (the section then says how to make one),
    and the sweep's record of it (``sweep_record``, shown after the mechanism); ``bundle``: a
    relative URL of a shared circuitsvis bundle instead of inlining it; ``links``: ``(label,
    relative URL)`` pairs above the title (the index, the run's twin)."""

    title: str = "invperm-interp report"
    metrics: list[Evaluation] | None = None
    train_cfg: TrainConfig | None = None
    timeline: Timeline | None = None
    checkpoints: int = 0
    sweep_record: SweepRecord | None = None
    bundle: str | None = None
    links: tuple[tuple[str, str], ...] = ()

    def with_run(self, run: RunDir) -> ReportContext:
        """This context with what the run directory holds: its timeline (``timeline.json``, written
        by ``invperm timeline``), how many checkpoints it kept and its sweep record
        (``mechanism.json``, written by ``invperm sweep``); a damaged or older file is left out."""
        import json
        import warnings

        found = record = None
        if run.timeline.is_file():
            try:
                found = Timeline.from_dict(json.loads(run.timeline.read_text()))
            except (ValueError, TypeError, KeyError, AttributeError, IndexError) as err:
                warnings.warn(f"{run.timeline} is damaged ({type(err).__name__}: {err}); the report "
                              "leaves the timeline out (`invperm timeline` writes it again)",
                              stacklevel=2)
        if run.mechanism.is_file():
            try:
                record = SweepRecord.read(run.mechanism)
            except ValueError:
                record = None  # a damaged or older record is the sweep's to redo, not the report's
        return replace(self, timeline=found, checkpoints=len(run.checkpoints()),
                       sweep_record=record)


def _training(metrics: list[Evaluation] | None, causal: bool) -> str:
    """The training curve and the accuracies against step ("" without metrics)."""
    if not metrics:
        return ""
    accuracy = accuracy_chart(metrics)
    parts = ["<h2>Training</h2>", '<div class="figs">', figure(
        training_chart(metrics, causal), "Training curve: eval loss against step.",
        training_caption(metrics, causal))]
    if accuracy is not None:
        parts.append(figure(accuracy, "Fraction of entries, rows and samples exact against step.",
                            "Entries, rows and whole samples exact after rounding."))
    return "\n".join(parts + ["</div>"])


def report_html(model: DisentangledModel, result: ModelAnalysis, batch: Batch,
                context: ReportContext = ReportContext()) -> str:
    """The report page as a string (see :func:`write_report`)."""
    metrics, train_cfg, timeline = context.metrics, context.train_cfg, context.timeline
    head = headline(result)
    if timeline is not None:  # the over-training result belongs in the first screen too
        first = timeline.first_faithful
        when = ("is never faithful at a checkpoint" if first is None
                else f"is first faithful at step {first}")
        head = (head.removesuffix("</div>") + f"<p>Over training (below): the final circuit alone "
                f"{when} of {timeline.steps[-1].step}.{_sparse(timeline)}</p></div>")
    parts = [_setup(model, train_cfg, metrics), _through_map(result), head,
             _results(model, result, batch, metrics, train_cfg), _training(metrics, model.cfg.causal),
             _over_training(context.timeline, context.checkpoints)]
    parts += [mechanism_section(result), sweep_verdict_section(context.sweep_record),
              _circuit(model, result), _constructions(result),
              _ablations(model, result), _certificate(model, result),
              _attention(model, batch, result.sample_patterns)]
    return page(context.title, "\n".join(p for p in parts if p), bundle=context.bundle,
                links=list(context.links) or None)


def write_report(model: DisentangledModel, result: ModelAnalysis, batch: Batch,
                 path: str | Path, context: ReportContext = ReportContext()) -> Path:
    """Write the report page for ``model`` (with ``result`` from ``analysis.record.analyze``) to
    ``path``; ``context``: what else it shows (:class:`ReportContext`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report_html(model, result, batch, context), encoding="utf-8")
    return path


def write_behaviour_report(model: torch.nn.Module, behaviour: list[str], path: str | Path,
                           context: ReportContext = ReportContext()) -> Path:
    """Write the page of a run whose mechanism the analyses cannot read (a standard model with
    LayerNorm or MLPs, ``training.run.unanalysable``) to ``path``: what was run, its
    ``behaviour`` as ``invperm analyze`` prints it (its scores, then why no mechanism is named)
    and its training curve."""
    lines = "".join(f"<p>{_esc(line)}</p>" for line in behaviour)
    parts = [_setup(model, context.train_cfg, context.metrics),
             f'<div class="headline none">{lines}</div>', _training(context.metrics, model.cfg.causal)]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(context.title, "\n".join(p for p in parts if p),
                         links=list(context.links) or None), encoding="utf-8")
    return path
