"""Claim: what the census's unnamed causal-scratch runs run, and how many a guarded form names.

Two groupings of the minimal circuits the census's rule leaves unnamed ('none'), and a recount:

- **by cell set** (every solved scratch 'none' run of ``assets/census.json``): each minimal circuit as
  its set of (layer, query block, key block) cells, a layer's copies identified with the blocks they
  copy (``L1.pos.S`` ~ ``pos.S``, ``L1.x`` ~ ``x``), templates and signs set aside; how many of
  ``theorem3_superposed``'s cells each holds, so identified.
- **by behaviour** (the runs of analyses/grids/discovery.toml, re-trained): each run's minimal circuit
  scored (its cells, zero ablation) on every other run: the runs whose circuits run each other.
- **the recount**: the superposed forms plus the layer-1 **content-mass guard** (:data:`GUARD`:
  the query row's content lifts the ``P`` keys, lowers the ``Y_P`` keys and lowers keys by their
  own content), found here and now in the library's registry (``maths.registry``:
  ``theorem3_superposed_guarded`` and its complement twin), and every run is named by the rule
  under zero, mean and resample ablation and scrubbing (``analysis.scrub``), ties reported
  (``analysis.ties``), with the named circuit's completeness (the model without it) under every
  style. "Before" is the rule's name from the same tests with the guarded forms left out
  (:func:`without_forms`): what the registry named before they were registered, whatever registry
  the runs' sweep ran with.

The guard is exact as β grows because it changes no lookup: a scratch row's content is 0, so its
queries get nothing; a ``P`` row's query (mass 1) lifts every ``P`` key by β and lowers it by β (net
0; the ``Y_P`` rows come after it); a ``Y_P`` row's query of mass ``m`` leaves the ``P`` keys as they
were and lowers every ``Y_P`` key by ``βm(1 + its mass)``, widening the margin by which the
``Y_P`` rows attend to the ``P`` rows. ``tests/maths/test_guarded_forms.py`` holds the registered forms to it.

Writes discovery.{json,md} next to the runs (the sweep folder), or into ``--out DIR``, or into the
checkout's assets/ with ``--update-assets`` (as ``make discovery`` does); the committed census is
read from assets/census.json. A folder holding no analysed run is refused before anything is
written.

Run: invperm sweep analyses/grids/discovery.toml --out runs/discovery --workers 1
     python analyses/discovery.py runs/discovery [--update-assets]   (each run's row is kept in its
     run folder's discovery.json)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

import torch
from census_report import share_text
from common import ASSETS, add_output_arguments, output, output_folder, refuse

from invperm_interp import HookedDisentangledTransformer
from invperm_interp.analysis.faithfulness import Tester
from invperm_interp.analysis.hypothesis import Hypothesis, as_hypothesis
from invperm_interp.analysis.mechanism import (
    SCREEN_SAMPLES,
    Answer,
    name_by_rule,
    test_constructions,
    verdict_of,
)
from invperm_interp.analysis.scrub import completeness, scrub_tester
from invperm_interp.analysis.sweep_record import SweepRecord
from invperm_interp.analysis.verdict import RULE, evaluation_batch
from invperm_interp.maths import registry

SAMPLES, SEED = 4096, 12345  # the census's evaluation batch
BEHAVIOUR_SAMPLES = 1024  # one circuit's cells scored on another run
STYLES = ("zero", "mean", "resample", "scrub")
#: The style the headline's "this circuit is the mechanism" uses (docs/results/scrubbing.md).
HEADLINE = "resample"
#: The layer-1 content-mass guard, with the signs trained models fit (assets/discovery.md).
GUARD = registry.CONTENT_MASS_GUARD
FORMS = {name: name.removesuffix("_guarded") for name in registry.GUARDED}  # guarded form -> its base
FAMILY = "theorem3_superposed"


def beta_exact() -> dict[str, float]:
    """The guarded forms' ``beta_exact`` in the registry (each checked exact at every d of its
    range by tests/maths/test_constructions.py)."""
    return {name: registry.get(name).beta_exact for name in FORMS}


def without_forms(tested: list) -> Answer:
    """The rule's answer from ``tested`` (anything :func:`name_by_rule` reads) with the guarded forms
    (:data:`FORMS`, at any placement) left out: the name before they were registered."""
    return name_by_rule([t for t in tested if t.construction not in FORMS])


def as_list(answer: Answer) -> list:
    """``[verdict, name, tied]``: an answer as the record keeps it."""
    return [answer.verdict, answer.name, list(answer.tied)]


# -- by cell set (the committed census) --------------------------------------------------------------
CELL = re.compile(r"L(\d+)(?:h\d+)? (\S+) at \(([^,]+), ([^)]+)\)")


def identified(text: str) -> tuple[int, str, str]:
    """``"L2 -I at (L1.pos.S, L1.x)"`` → ``(2, "pos.S", "x")``: a cell, a layer's copies identified."""
    layer, _, query, key = CELL.fullmatch(text).groups()
    strip = lambda block: block.split(".", 1)[1] if block.startswith("L1.") else block  # noqa: E731
    return int(layer), strip(query), strip(key)


def raw(text: str) -> tuple[int, str, str]:
    """``"L2 -I at (L1.pos.S, L1.x)"`` → ``(2, "L1.pos.S", "L1.x")``: the cell as recorded."""
    layer, _, query, key = CELL.fullmatch(text).groups()
    return int(layer), query, key


def family_sites(name: str, identify: bool = True) -> frozenset[tuple[int, str, str]]:
    strip = lambda block: block.split(".", 1)[1] if identify and block.startswith("L1.") else block  # noqa: E731
    return frozenset((c.layer + 1, strip(c.query), strip(c.key)) for c in registry.get(name).cells)


def by_cell_set(rows: list[dict]) -> dict:
    """The solved scratch 'none' runs of the census grouped by identified cell set."""
    none = [r for r in rows if r["kind"] == "scratch" and r["steps_to_target"] is not None
            and r["mechanism"] == "none"]
    sets = {r["run"]: frozenset(map(identified, r["minimal_cells"])) for r in none}
    by_run = {r["run"]: r["minimal_cells"] for r in none}
    forms = Counter(sets.values())
    superposed, complement = family_sites(FAMILY), family_sites("theorem3_superposed_complement")
    recorded = family_sites(FAMILY, identify=False)
    return {"runs": len(none), "forms": len(forms),
            "forms_held_by_several": sum(n > 1 for n in forms.values()),
            "runs_in_shared_forms": sum(n for n in forms.values() if n > 1),
            "largest_form": max(forms.values(), default=0),
            "superposed_sites": len(superposed), "complement_sites": len(complement),
            "superposed_cells": len(recorded),
            "per_run": {run: {"cells": len(s), "superposed_held": len(s & superposed),
                              "complement_held": len(s & complement),
                              "superposed_cells_held": len(
                                  {raw(c) for c in by_run[run]} & recorded),
                              "layer1_content_query": sorted(f"({q}, {k})" for layer, q, k in s
                                                             if layer == 1 and q == "x")}
                        for run, s in sets.items()}}


# -- the re-trained runs ------------------------------------------------------------------------------
def score_dict(test) -> dict:
    s = test.circuit
    return {"loss_recovered": s.loss_recovered, "recovered_se": s.recovered_se,
            "rows_exact": s.rows_exact, "signs_agree": test.signs_agree, "verdict": verdict_of(test)}


def testers(model, batch, style: str) -> tuple[Tester, Tester]:
    """The screening tester (first :data:`SCREEN_SAMPLES`) and the whole batch's, under ``style``."""
    if style == "scrub":
        return scrub_tester(model, batch.head(SCREEN_SAMPLES)), scrub_tester(model, batch)
    return Tester(model, batch.head(SCREEN_SAMPLES), style), Tester(model, batch, style)


def guard_betas(model, batch) -> list[float]:
    """The model's fitted β of each :data:`GUARD` atom (its template and sign, with
    ``theorem3_superposed``'s atoms beside it, gauge-fixed weights): positive where it agrees."""
    base = as_hypothesis(model, FAMILY)
    atoms = Hypothesis("guarded", base.cells + GUARD, base.read, "atoms")
    test = Tester(model, batch.head(SCREEN_SAMPLES)).test(atoms, minimality=False)
    return list(test.template_betas[-len(GUARD):])


def analyse(run_dir: Path) -> dict:
    model = HookedDisentangledTransformer.from_run(str(run_dir))
    record = SweepRecord.read(run_dir / "mechanism.json")
    batch = evaluation_batch(model, SAMPLES, SEED)
    names, before, scores = {}, {}, {}
    for style in STYLES:
        screen, full = testers(model, batch, style)
        tested = test_constructions(model, screen, resolve=full, minimality=False)
        names[style], before[style] = as_list(name_by_rule(tested)), as_list(without_forms(tested))
        scores[style] = {t.hypothesis: score_dict(t) for t in tested}
    head = names[HEADLINE]
    claim = head[1] or "theorem3_superposed_guarded"
    removed = completeness(model, claim, batch)
    minimal = record.mechanism.minimal
    return {"run": run_dir.name, "d": model.cfg.d, "census_names": {
                "zero": str(record.answer), "mean": str(record.under.get("mean")),
                "resample": str(record.under.get("resample"))},
            "before": before, "names": names, "scores": scores, "claim": claim,
            "completeness": {s: v.loss_recovered for s, v in removed.items()},
            "minimal": {"cells": [list(c) for c in minimal.cells], "read": list(minimal.read),
                        "faithful": minimal.faithful},
            "guard_betas": guard_betas(model, batch)}


def behaviour(rows: list[dict], runs: Path) -> dict[str, list[str]]:
    """Per run: the runs on which its minimal circuit (its cells, zero ablation) is faithful."""
    hyps = [Hypothesis(r["run"], tuple(map(tuple, r["minimal"]["cells"])), tuple(r["minimal"]["read"]),
                       "cells") for r in rows]
    runs_on: dict[str, list[str]] = {r["run"]: [] for r in rows}
    for r in rows:
        model = HookedDisentangledTransformer.from_run(str(runs / r["run"]))
        tester = Tester(model, evaluation_batch(model, BEHAVIOUR_SAMPLES, SEED))
        for hyp, score in zip(hyps, tester.circuits(hyps)):
            if RULE.is_faithful(score):
                runs_on[hyp.name].append(r["run"])
    return runs_on


def text(name: list) -> str:
    verdict, named, tied = name
    return " = ".join([named, *tied]) if named else verdict


def unnamed_before(rows: list[dict]) -> list[dict]:
    """The rows the rule calls 'none' under zero ablation with the guarded forms left out."""
    return [r for r in rows if r["before"]["zero"][0] == "none"]


def markdown(census: dict, rows: list[dict], runs_on: dict, betas: dict) -> str:
    none = unnamed_before(rows)
    n = len(none)
    lines = [
        "# Discovery by function: the census's unnamed causal-scratch runs", "",
        "Written by analyses/discovery.py from assets/census.json and the runs of "
        "analyses/grids/discovery.toml (the census's settings and seeds, re-trained); read in "
        "docs/results/census.md. Counts carry Wilson 95% intervals.", "",
        "## By cell set (the committed census)", "",
        f"The {census['runs']} solved causal-scratch runs the committed census's rule calls 'none' (its "
        "registry holds the guarded forms), each minimal circuit as "
        "its set of (layer, query, key) cells with a layer's copies identified (`L1.pos.S` ~ "
        "`pos.S`, `L1.x` ~ `x`), templates and signs set aside: "
        f"**{census['forms']} cell sets**, {census['forms_held_by_several']} of them held by more than "
        f"one run ({census['runs_in_shared_forms']} runs; the largest by {census['largest_form']}). "
        f"`theorem3_superposed` has {census['superposed_sites']} such cells and its complement twin "
        f"{census['complement_sites']}.", "",
        f"| cells of theorem3_superposed held | of its {census['superposed_cells']} cells as "
        f"recorded | of its {census['superposed_sites']} with copies identified |",
        "| --- | --- | --- |"]
    held = Counter(v["superposed_cells_held"] for v in census["per_run"].values())
    same = Counter(v["superposed_held"] for v in census["per_run"].values())
    lines += [f"| {k} | {held[k]} runs | {same[k]} runs |"
              for k in sorted(set(held) | set(same), reverse=True)]
    guard = Counter(c for v in census["per_run"].values() for c in v["layer1_content_query"])
    lines += ["", "Layer-1 content-query cells in these minimal circuits (runs): "
              + ", ".join(f"{c}: {k}" for c, k in guard.most_common()) + ".", "",
              "## The guarded forms, registered", "",
              "`theorem3_superposed` and its complement twin, each with the layer-1 content-mass "
              "guard (1 at (x, pos.P), −1 at (x, pos.Y), −1 at (x, x)), in the library's registry: "
              "exact (max error < 1e-6, float64) at every d of their range at β "
              + ", ".join(f"{k} = {v:g}" for k, v in betas.items()) + ".", "",
              "The guard's fitted β in the re-trained runs' gauge-fixed weights (each atom with "
              "its sign; positive where the run agrees): " + "; ".join(
                  f"({q}, {k}) {label}: {sum(r['guard_betas'][i] > 0 for r in rows)} of "
                  f"{len(rows)} runs, {min(r['guard_betas'][i] for r in rows):.2f} to "
                  f"{max(r['guard_betas'][i] for r in rows):.2f}"
                  for i, (_, _, q, k, label) in enumerate(GUARD)) + ".", "",
              "## The re-trained runs", "",
              f"{len(rows)} runs ({n} of them 'none' under zero ablation without the guarded forms), "
              "each named by the rule on the census's 4,096 evaluation samples (seed 12345) under "
              "every style, with the guarded forms and, **before**, from the same tests with them "
              "left out; a tie is the set of faithful constructions whose loss-recovered "
              "intervals overlap (`analysis.ties`). **without**: the loss the model recovers with "
              "the named circuit removed (the guarded superposed form where the headline style, "
              f"{HEADLINE} ablation, names none).", "",
              f"| style | of those {n}, named before (the guarded forms left out) | named with the "
              "guarded forms | of them ties | median loss recovered "
              "without the named circuit (every run) | names |",
              "| --- | --- | --- | --- | --- | --- |"]
    for style in STYLES:
        before = sum(r["before"][style][1] is not None for r in none)
        now = [r for r in none if r["names"][style][1]]
        ties = sum(bool(r["names"][style][2]) for r in now)
        left = sorted(r["completeness"][style] for r in rows)
        median = (left[(len(left) - 1) // 2] + left[len(left) // 2]) / 2
        names = Counter(text(r["names"][style]) if not r["names"][style][2] else " = ".join(
            sorted([r["names"][style][1], *r["names"][style][2]])) for r in none)  # a tie as a set
        lines.append(f"| {style} | {share_text(before, n)} | "
                     f"{share_text(len(now), n)} | {ties} | {median:.3f} | "
                     + ", ".join(f"{k}: {v}" for k, v in names.most_common()) + " |")
    shared = Counter(frozenset(v) for v in runs_on.values())
    lines += ["", "## By behaviour", "",
              "Each run's minimal circuit (its cells, zero ablation, 1,024 samples) scored on every "
              "re-trained run: on how many it is faithful (the rule's thresholds, point estimates).",
              "", "| run | before (zero) | minimal cells | faithful on runs |",
              "| --- | --- | --- | --- |"]
    lines += [f"| {r['run']} | {text(r['before']['zero'])} | {len(r['minimal']['cells'])} | "
              f"{len(runs_on[r['run']])} of {len(rows)} |" for r in rows]
    widest = max(rows, key=lambda r: len(runs_on[r["run"]]))
    lines += ["", f"Distinct sets of runs run by one circuit: {len(shared)}; the widest, "
              f"{widest['run']}'s ({len(widest['minimal']['cells'])} cells), runs "
              f"{len(runs_on[widest['run']])} of {len(rows)}.", "",
              "## Every run", "", "| run | " + " | ".join(STYLES) + " | without: "
              + " / ".join(STYLES) + " |", "|" + " --- |" * (len(STYLES) + 2)]
    for r in rows:
        lines.append(f"| {r['run']} | " + " | ".join(text(r["names"][s]) for s in STYLES) + " | "
                     + " / ".join(f"{r['completeness'][s]:.2f}" for s in STYLES) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", type=Path, help="the sweep folder of analyses/grids/discovery.toml")
    add_output_arguments(parser, "the runs folder")
    args = parser.parse_args(argv)
    try:
        out = output_folder(args, args.runs)
    except ValueError as err:
        return refuse("discovery", err)
    run_dirs = sorted(p for p in args.runs.glob("scratch_d*_seed*") if (p / "mechanism.json").is_file())
    if not run_dirs:
        return refuse("discovery", f"runs: {args.runs} holds no analysed run (scratch_d*_seed*/"
                      "mechanism.json): expected the sweep folder of analyses/grids/discovery.toml")
    torch.set_num_threads(1)
    betas = beta_exact()
    census = by_cell_set(json.loads((ASSETS / "census.json").read_text())["runs"])
    rows = []
    for run_dir in run_dirs:
        cached = run_dir / "discovery.json"  # one run's row, kept so a rerun resumes
        if not cached.is_file():
            cached.write_text(json.dumps(analyse(run_dir), indent=2) + "\n")
        row = json.loads(cached.read_text())
        if "guard_betas" not in row:  # a row kept before the fit was recorded
            model = HookedDisentangledTransformer.from_run(str(run_dir))
            row["guard_betas"] = guard_betas(model, evaluation_batch(model, SAMPLES, SEED))
            cached.write_text(json.dumps(row, indent=2) + "\n")
        rows.append(row)
        print(rows[-1]["run"], {s: text(v) for s, v in rows[-1]["names"].items()}, flush=True)
    rows.sort(key=lambda r: (r["d"], int(r["run"].rsplit("seed", 1)[1])))
    runs_on = behaviour(rows, args.runs)
    guard = [[c.layer, c.query, c.key, c.label] for c in GUARD]  # as first recorded: no head
    data = {"guard": guard, "beta_exact": betas, "census": census,
            "behaviour": runs_on, "runs": rows}
    output(out, "discovery.json").write_text(json.dumps(data, indent=1) + "\n")
    output(out, "discovery.md").write_text(markdown(census, rows, runs_on, betas))
    print(f"wrote {out / 'discovery.json'} and {out / 'discovery.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
