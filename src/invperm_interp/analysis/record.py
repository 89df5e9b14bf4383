"""One model's whole analysis as one typed record: :func:`analyze` → :class:`ModelAnalysis`.

``invperm analyze`` prints it and writes it as ``analysis.json``; the HTML report renders it;
``analyses/`` read it. Its sections, in the order a reader wants them (``ModelAnalysis.SECTIONS``):
the mechanism by the library's one rule with its faithfulness, completeness and minimality; the
minimal circuit; the circuit (atoms of the gauge-fixed weights, per-cell templates); every fitting
construction, tested by running it and by attention-pattern distance; ablations; the gauge check;
the Lemma 1 certificate.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import torch

from ..config import ModelConfig
from ..labels import excess_text, name_streams
from ..maths.floors import dependency_map
from ..model.build import analysis_model, map_summary
from ..model.disentangled import DisentangledModel, check_disentangled
from ..model.variants import model_patterns, model_run
from ..task import Batch
from .ablate import AblationResult, standard_ablations
from .compare import ConstructionMatch, closest_construction
from .faithfulness import Faithfulness, Tester, check_batch
from .gauge import gauge_check
from .hypothesis import cell_text
from .mechanism import Mechanism, MinimalCircuit, mechanism
from .templates import CellMatch, Circuit, explain_and_match

RECORD_VERSION = 1


@dataclass(frozen=True)
class Lemma1:
    """The Lemma 1 certificate on a few samples (``theory.dependency_map``): ``norms[r][t]`` is the
    largest ``||∂ out[r] / ∂ X[t]||`` of read-out row ``r`` (at input position ``positions[r]``);
    ``causal_ok``: every dependence on a later row is exactly 0; ``max_later``: the largest one."""

    causal_ok: bool
    max_later: float
    positions: tuple[int, ...]
    norms: tuple[tuple[float, ...], ...]

    def to_dict(self) -> dict:
        return {"causal_ok": self.causal_ok, "max_later": self.max_later,
                "positions": list(self.positions), "norms": [list(r) for r in self.norms]}

    @classmethod
    def from_dict(cls, data: dict) -> Lemma1:
        return cls(data["causal_ok"], data["max_later"], tuple(data["positions"]),
                   tuple(tuple(r) for r in data["norms"]))


@dataclass(frozen=True)
class ModelAnalysis:
    """Everything :func:`analyze` finds about one model on one batch.

    Fields:
    - ``source`` (where the model came from), ``model`` (its ``ModelConfig``), ``n_samples``;
    - ``mse``, ``rows_exact``: the model's own score; ``causal_floor``: the best any causally
      masked model can do with this layout and read-out (``theory.causal_floor``);
    - ``mechanism``: :class:`analysis.mechanism.Mechanism`, the one rule's answer: ``.name`` (a
      registry construction or ``"none"``), ``.faithfulness`` (its circuit-only model, the model
      without it, each cell removed), ``.tested`` (every fitting working construction, tested the
      same way, best first) and ``.minimal`` (:class:`MinimalCircuit`);
    - ``circuit``: the atoms of the gauge-fixed weights (``explain``); ``cells``: one
      :class:`CellMatch` per (layer, head, query, key) cell;
    - ``closest``: the fitting constructions by attention-pattern distance (``closest_construction``);
    - ``ablations``: the standard ablations against the causal floor;
    - ``gauge_check``: largest attention-pattern change from gauge-fixing ``A`` (~1e-6 in float32);
    - ``lemma1``: the dependency certificate;
    - ``accuracy``: ``entry_acc``, ``row_acc``, ``sample_acc`` (entries, rows, whole ``Y`` right
      after rounding) on the batch; ``sample_patterns``: per layer, every head's attention on
      sample 0, ``(H, T, T)`` nested lists (what the report draws; ``None`` in older records);
    - ``through_map``: for a standard model, analysed as the disentangled model it maps to exactly
      (``model`` is then that model's config), ``note_map.map_summary``: the standard config and
      each head's ``W_OV`` spectrum and rank; ``None`` for a disentangled model.
    """

    SECTIONS = ("mechanism", "minimal_circuit", "circuit", "constructions", "ablations", "gauge",
                "lemma1")

    source: str
    model: ModelConfig
    n_samples: int
    mse: float
    rows_exact: float
    causal_floor: float
    mechanism: Mechanism
    circuit: Circuit
    cells: tuple[CellMatch, ...]
    closest: tuple[ConstructionMatch, ...]
    ablations: tuple[AblationResult, ...]
    gauge_check: float
    lemma1: Lemma1
    accuracy: dict[str, float] | None = None
    sample_patterns: tuple | None = None
    through_map: dict | None = None
    version: int = field(default=RECORD_VERSION)

    @property
    def faithfulness(self) -> Faithfulness | None:
        """The named construction's test (``None`` when the mechanism is ``"none"``)."""
        return self.mechanism.faithfulness

    @property
    def minimal(self) -> MinimalCircuit:
        return self.mechanism.minimal

    def to_dict(self) -> dict:
        return {
            "version": self.version, "source": self.source, "model": self.model.to_dict(),
            "n_samples": self.n_samples, "mse": self.mse, "rows_exact": self.rows_exact,
            "causal_floor": self.causal_floor, "mechanism": self.mechanism.to_dict(),
            "circuit": self.circuit.to_dict(), "cells": [c.to_dict() for c in self.cells],
            "closest": [dict(vars(m)) for m in self.closest],
            "ablations": [a.to_dict() for a in self.ablations],
            "gauge_check": self.gauge_check, "lemma1": self.lemma1.to_dict(),
            "accuracy": self.accuracy,
            "sample_patterns": None if self.sample_patterns is None else list(self.sample_patterns),
            **({} if self.through_map is None else {"through_map": self.through_map}),
        }

    @classmethod
    def from_dict(cls, data: dict) -> ModelAnalysis:
        if data.get("version") != RECORD_VERSION:
            raise ValueError(f"analysis record version must be {RECORD_VERSION}, got "
                             f"{data.get('version')!r}: rerun `invperm analyze`")
        return cls(
            source=data["source"], model=ModelConfig.from_dict(data["model"]),
            n_samples=data["n_samples"], mse=data["mse"], rows_exact=data["rows_exact"],
            causal_floor=data["causal_floor"], mechanism=Mechanism.from_dict(data["mechanism"]),
            circuit=Circuit.from_dict(data["circuit"]),
            cells=tuple(CellMatch(**c) for c in data["cells"]),
            closest=tuple(ConstructionMatch(**m) for m in data["closest"]),
            ablations=tuple(AblationResult.from_dict(a) for a in data["ablations"]),
            gauge_check=data["gauge_check"], lemma1=Lemma1.from_dict(data["lemma1"]),
            accuracy=data.get("accuracy"),
            sample_patterns=None if data.get("sample_patterns") is None
            else tuple(data["sample_patterns"]), through_map=data.get("through_map"))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> ModelAnalysis:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"analysis record is not JSON: {err}") from None
        if not isinstance(data, dict):
            raise ValueError("analysis record must be a JSON object")
        return cls.from_dict(data)


def analyze(model: DisentangledModel, batch: Batch, source: str = "", *,
            lemma1_samples: int = 4,
            explained: tuple[Circuit, list[CellMatch]] | None = None) -> ModelAnalysis:
    """The whole analysis of ``model`` on ``batch``. The clean run, the gauge-fixed weights and the
    atom fit are computed once and shared by every part; circuit variants run as batched forwards.
    A standard attention-only model without LayerNorm (plain or hooked) is analysed through its
    exact map to the disentangled model (``through_map``; docs/standard.md); with LayerNorm or MLPs
    it is refused in one line. ``explained``: ``explain_and_match(model)`` already computed (as
    ``invperm analyze`` does for its memory estimate, ``analysis.budget``)."""
    through_map = None
    if isinstance(getattr(model, "cfg", None), ModelConfig):
        through_map, model = map_summary(model), analysis_model(model)
    check_disentangled(model)
    check_finite_norm(model)
    check_batch(model, batch)  # before the clean run reads it
    X = batch.X.to(model.device, model.cfg.torch_dtype)
    final, patterns = model_run(model, X)  # the clean run, shared by every part
    tester = Tester(model, batch, output=final @ model.unembed.W_U.detach())  # and gauge_fix(A)
    circuit, cells = explained or explain_and_match(model)  # the atoms, fitted once
    mech = mechanism(model, batch, circuit=circuit, tester=tester)
    ablations = standard_ablations(model, tester.batch, before=tester.clean.mse, final=final)
    deps = dependency_map(model, tester.batch.X[:lemma1_samples])
    later = torch.arange(deps.norms.shape[-1])[None, :] > torch.tensor(deps.positions)[:, None]
    norms = deps.norms.double().cpu()
    return ModelAnalysis(
        source=source, model=model.cfg, n_samples=len(batch), mse=tester.clean.mse,
        rows_exact=tester.clean.rows_exact, causal_floor=ablations[0].causal_floor,
        mechanism=mech, circuit=circuit, cells=tuple(cells),
        closest=closest_construction(model, tester.batch, circuit=circuit, fixed=tester.fixed),
        ablations=tuple(ablations), gauge_check=gauge_check(model, X, tester.fixed, patterns),
        lemma1=Lemma1(deps.causal_ok, float(norms[later].max()) if bool(later.any()) else 0.0,
                      tuple(deps.positions), tuple(tuple(r) for r in norms.tolist())),
        accuracy=_accuracy(tester.output, tester.batch.Y), sample_patterns=_sample_patterns(model, batch),
        through_map=through_map)


def _accuracy(out: torch.Tensor, Y: torch.Tensor) -> dict[str, float]:
    """Entries, rows and whole samples right after rounding: ``out``, ``Y`` ``(B, d, d)``."""
    hit = out.round() == Y.to(out)
    rows = hit.all(-1)
    return {"entry_acc": float(hit.double().mean()), "row_acc": float(rows.double().mean()),
            "sample_acc": float(rows.all(-1).double().mean())}


def _sample_patterns(model: DisentangledModel, batch: Batch) -> tuple:
    """Per layer, every head's attention pattern on sample 0 as nested lists ``(H, T, T)``."""
    return tuple(p[0].double().cpu().tolist() for p in model_patterns(model, batch.X[:1])[1])


def check_finite_norm(model: DisentangledModel) -> None:
    """Shares and cosines square the weights: weights whose squared norm overflows float64 (a
    construction at beta ~1e155 or more) are refused rather than reported as NaN."""
    square = sum(float(p.detach().double().pow(2).sum()) for p in model.parameters())
    if not math.isfinite(square):
        largest = max(float(p.detach().abs().max()) for p in model.parameters())
        raise ValueError(f"the model's weights are too large to analyze (largest |weight| "
                         f"{largest:.3g}; their squared norm overflows float64): rescale them, or "
                         f"for a construction pass beta <= 1e150 (its patterns are exact from "
                         f"beta ~ 100 on)")


def atom_label(atom) -> str:
    """``"I at (pos.P, x)"`` plus its gauge twins, from an :class:`Atom` (or its dict)."""
    a = atom if isinstance(atom, dict) else atom.to_dict()
    twins = "".join(f" = {t} at ({q}, {k})" for q, k, t in a.get("twins", ()))
    return f"{a['label']} at ({a['query']}, {a['key']}){twins}"


def headline(result: ModelAnalysis, min_share: float = 0.01) -> str:
    """The human-readable text ``invperm analyze`` prints: mechanism first."""
    cfg, mech = result.model, result.mechanism
    lines = [
        f"{result.source}: {cfg.attention_dir}, reads {cfg.readout} rows; on {result.n_samples} fresh "
        f"samples (not the training's eval batch) MSE "
        f"{excess_text(result.mse, result.causal_floor if cfg.causal else None)}, rows exact "
        f"{result.rows_exact:.1%} (causal floor {result.causal_floor:.4g})",
        "", f"mechanism: {mech}",
    ]
    if result.through_map is not None:
        lines[1:1] = ["", map_text(result.through_map)]
    f = mech.faithfulness
    if f is not None:
        lines += ["  cells (fitted beta): " + "; ".join(
            f"{cell_text(c)} x {b:.3g}" for c, b in zip(f.cells, f.betas)),
            f"  complete: without them the model's MSE is {f.without.mse:.3g} "
            f"(loss recovered {_pct(f.without.loss_recovered)})",
            "  minimal: circuit MSE with one cell removed: " + "; ".join(
                f"{cell_text(c)} -> {s.mse:.3g} ({s.rows_exact:.0%} rows)"
                for c, s in zip(f.cells, f.minimality))]
    m = mech.minimal
    lines += [f"minimal circuit: {m.size} cells{f' ({m.proof})' if m.proof else ''}, "
              f"read {', '.join(m.read) or '-'}; "
              f"{'faithful' if m.faithful else 'NOT faithful'} (rows exact {m.score.rows_exact:.1%}, "
              f"loss recovered {_pct(m.score.loss_recovered)}, {m.weight_share:.0%} of the weights)"]
    lines += [f"  {cell_text(c)}" for c in m.cells]
    lines += ["", "constructions tested by running their cells alone (rule: rows exact >= "
              f"{mech.rule.rows:.0%} and loss recovered >= {mech.rule.recovered:.0%})"]
    for t in mech.tested:
        lines.append(f"  {t.hypothesis:22s} rows exact {t.circuit.rows_exact:6.1%}  loss recovered "
                     f"{_pct(t.circuit.loss_recovered):>6s}  MSE {t.circuit.mse:.3g}")
    lines += ["", f"gauge: attention patterns of A and gauge_fix(A) differ by {result.gauge_check:.2g} "
              f"at most on {result.n_samples} samples",
              "", "circuit: atoms of gauge_fix(A) holding >= 1% of their layer (layer: the note's, "
              "from 1; score: gauge-fixed cosine; raw: the raw cell's)",
              f"  {'layer':5s}  {'cell':34s} {'beta':>8s} {'share':>6s} {'score':>6s} {'raw':>6s}"]
    atoms = sorted(result.circuit.atoms, key=lambda a: (a.layer, a.head, -a.share))
    for a in atoms:
        if a.share >= min_share:
            cell = f"{a.label} at ({a.query}, {a.key})"
            lines.append(f"  {a.layer + 1:<5d}  {cell:34s} {a.scale:8.3g} {a.share:6.1%} "
                         f"{a.score:6.3f} {a.raw_score:6.3f}{atom_label(a)[len(cell):]}")
    left = ", ".join(f"layer {i + 1} {s:.1%}" for i, s in enumerate(result.circuit.residual_share))
    lines.append(f"  unexplained: {left}; {len(atoms)} atoms in all")
    if result.closest:
        lines += ["", "closest constructions by attention patterns (each at its best beta)"]
        for c in result.closest[:3]:
            lines.append(f"  {c.name:22s} beta {c.beta:<6g} pattern TV {c.pattern_tv:.3f}  "
                         f"weight cos {c.weight_cosine:.2f}")
    # Ablation names speak of the note's h^l; the text names streams as the report does.
    lines += ["", "ablations"] + [f"  {name_streams(str(a), result.model.n_layers)}"
                                  for a in result.ablations]
    verdict = ("every dependence on a later input row is exactly 0" if result.lemma1.causal_ok
               else f"read-out rows depend on later input rows (up to {result.lemma1.max_later:.3g})")
    lines += ["", f"Lemma 1: {verdict}"]
    return "\n".join(lines)


def map_text(through_map: dict) -> str:
    """One paragraph: the standard model analysed through its map, and each head's ``W_OV`` rank
    and largest singular values."""
    std = through_map["model"]
    heads = "; ".join(
        f"layer {layer + 1} head {h}: rank {rank}, singular values "
        + ", ".join(f"{v:.3g}" for v in values[:4]) + (" …" if len(values) > 4 else "")
        for layer, (ranks, spectra) in enumerate(zip(through_map["ov_rank"],
                                                     through_map["ov_spectra"]))
        for h, (rank, values) in enumerate(zip(ranks, spectra)))
    return (f"a standard transformer (d_model {std['d_model']}, d_head {std['d_head']}), analysed "
            f"exactly through its map to the disentangled model (docs/standard.md): every result "
            f"below is of the disentangled model computing the same function. W_OV = W_V W_O per "
            f"head: {heads}")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"
