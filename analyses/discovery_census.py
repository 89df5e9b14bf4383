"""Claim: the constructions discovery registered name the runs the note's forms leave unnamed, on
seeds discovery never saw.

Reads two sweeps of the same configurations: discovery's own seeds
(``analyses/grids/discovery_shapes.toml``, the runs ``invperm discover --register`` registered
from) and held-out seeds (``analyses/grids/discovery_heldout.toml``), each analysed by the rule
with the registry as it is now (the note's forms and the discovered ones in
``src/invperm_interp/maths/discovered.json``). Per configuration and seed set: the solved runs, the
named count with the discovered forms and without them (the rule's answer recomputed from the same
recorded tests with the discovered constructions left out: ``SweepRecord.answer_without``),
each with its Wilson 95% interval. Every held-out run left unnamed is characterised: its minimal
circuit, the loss the best construction tested on it recovers, and what its circuit idealised to
(``analysis.idealise``), or why no exact form was found. Writes discovery_census.{json,md} beside
the held-out runs, into ``--out DIR``, or into the checkout's assets/ with ``--update-assets``.
Each held-out run a discovered construction names gets the negative controls of
``analyses/controls.py`` (the empty claim, random cell sets of its size, the other constructions,
under every style).

Run: python analyses/discovery_census.py runs/discovery_shapes runs/discovery_heldout [--update-assets]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

import torch
from census_report import share_text
from common import add_output_arguments, output, output_folder, refuse
from controls import SAMPLES as CONTROL_SAMPLES
from controls import SEED as CONTROL_SEED
from controls import cached_row, claim_of

from invperm_interp.analysis.controls import CONTROL_STYLES
from invperm_interp.analysis.discover import SIGN_SAMPLES, circuit_form, signs_held
from invperm_interp.analysis.faithfulness import Tester
from invperm_interp.analysis.hypothesis import as_hypothesis
from invperm_interp.analysis.idealise import idealise
from invperm_interp.analysis.scrub import scrub_tester
from invperm_interp.analysis.sweep_record import SweepRecord
from invperm_interp.analysis.treeify import treeified
from invperm_interp.analysis.verdict import evaluation_batch, judge
from invperm_interp.maths import constructions, registry
from invperm_interp.maths.describe import describe
from invperm_interp.sweep.collect import read_rows
from invperm_interp.training.progress import progress_bar
from invperm_interp.training.run import Run

FIGURE_D = 5  # the size the discovered constructions are drawn at


def run_rows(folder: Path, seeds: str, found: set[str]) -> tuple[list[dict], dict]:
    """One row per solved, analysed run of ``folder`` and the records of its unnamed ones."""
    rows, unnamed = [], {}
    for _, line in read_rows(folder):
        run_dir = folder / line.name
        record = SweepRecord.of_run(run_dir) if line.steps_to_solve is not None else None
        if record is None:
            continue
        mech = record.mechanism
        kind = "bidirectional" if line.model["attention_dir"] == "bidirectional" else "scratch"
        heads = line.model["n_heads"]
        shape = f"{line.model['n_layers']}x{heads if isinstance(heads, int) else max(heads)}"
        without = record.answer_without(found)
        rows.append({"run": line.name, "seeds": seeds, "kind": kind, "shape": shape,
                     "seed": line.train["seed"], "name": str(record.answer),
                     "name_without": str(without),
                     "minimal_cells": len(mech.minimal.cells), "minimal_faithful": mech.minimal.faithful,
                     "minimal_optimal": mech.minimal.optimal,
                     "minimal_proof": mech.minimal.proof,
                     "best_recovered": max((t.circuit.loss_recovered or 0.0 for t in mech.tested),
                                           default=None)})
        if mech.name is None:
            unnamed[line.name] = (run_dir, mech)
    return rows, unnamed


def is_named(name: str) -> bool:
    return name not in ("none", "borderline", "untestable")


def summarize(rows: list[dict], found: set[str]) -> list[dict]:
    groups = defaultdict(list)
    for r in rows:
        groups[(r["kind"], r["shape"], r["seeds"])].append(r)
    out = []
    for (kind, shape, seeds), rs in sorted(groups.items()):
        n = len(rs)
        named = sum(is_named(r["name"]) for r in rs)
        by_found = sum(any(f in r["name"] for f in found) for r in rs)
        out.append({"kind": kind, "shape": shape, "seeds": seeds, "solved": n,
                    "named_without": sum(is_named(r["name_without"]) for r in rs),
                    "named": named, "named_by_discovered": by_found,
                    "none": sum(r["name"] == "none" for r in rs),
                    "names": dict(Counter(r["name"] for r in rs).most_common())})
    return out


def control_rows(folder: Path, rows: list[dict], found: set[str]) -> list[dict]:
    """``analyses/controls.py``'s controls of each held-out run a discovered construction names:
    its claim beside the empty claim, random cell sets of its size and the other constructions,
    under every style (kept in the run's controls.json, as that script keeps them)."""
    out = []
    for r in rows:
        if r["seeds"] != "held-out" or not any(f in r["name"] for f in found):
            continue
        run_dir = folder / r["run"]
        out.append(cached_row(run_dir, SweepRecord.of_run(run_dir), r["kind"], r["seed"]))
    return out


def treeified_row(run_dir: Path) -> dict:
    """The run's claim (``controls.claim_of``: the named construction) scrubbed to the bottom of
    the recursion (``analysis.treeify``) and at one level, on the controls' samples, kept in the
    run's treeified.json."""
    cached = run_dir / "treeified.json"
    if not cached.is_file():
        model = Run.load(run_dir).analysis_model
        batch = evaluation_batch(model, CONTROL_SAMPLES, CONTROL_SEED)
        hyp = as_hypothesis(model, claim_of(SweepRecord.of_run(run_dir)).construction)
        tester = scrub_tester(model, batch)
        deep, one = treeified(tester, hyp, model.cfg.n_layers), tester.circuit(hyp)
        cached.write_text(json.dumps({"claim": hyp.name, "deep": judge(deep), "one": judge(one),
                                      "deep_recovered": deep.loss_recovered}) + "\n")
    return json.loads(cached.read_text())


def control_summary(rows: list[dict]) -> list[dict]:
    """Per style: runs it can test (the empty claim rejected), random sets rejected, other
    constructions rejected, the discovered claim passing."""
    out = []
    for style in CONTROL_STYLES:
        cs = [next(c for c in r["controls"] if c["style"] == style) for r in rows]
        others = [v for c in cs for _, v in c["others"]]
        out.append({"style": style, "runs": len(cs), "empty_rejected": sum(c["testable"] for c in cs),
                    "random_rejected": sum(c["random_rejected"] for c in cs),
                    "random_draws": sum(c["draws"] for c in cs),
                    "others_rejected": sum(v == "not faithful" for v in others),
                    "others": len(others),
                    "claim_passes": sum(c["testable"] and c["claim_verdict"] == "faithful"
                                        for c in cs)})
    return out


def characterise(unnamed: dict) -> dict:
    """What each unnamed run's minimal circuit idealised to (``analysis.idealise``), or why there is
    nothing to idealise."""
    out = {}
    for key, (run_dir, mech) in progress_bar(unnamed.items(), desc="idealise", unit="run"):
        if mech.verdict != "none" or not mech.minimal.faithful:
            reason = (mech.verdict if mech.verdict != "none"
                      else "no faithful minimal circuit among its atoms' cells")
            out[key] = {"reason": reason, "idealised": None}
            continue
        model = Run.load(run_dir).analysis_model
        form = circuit_form(model, mech.minimal.cells, mech.minimal.read)
        tester = Tester(model, evaluation_batch(model, SIGN_SAMPLES, 12345))
        found = idealise(form, accept=lambda f, m=model, t=tester: signs_held(f, m, t))
        out[key] = {"reason": "unnamed", "idealised": found.to_dict()}
    return out


def construction_section(name: str) -> list[str]:
    """A discovered construction as the note's are printed: its cells, β, d range, provenance, its
    words and its figure."""
    spec = registry.get(name)
    prov = dict(spec.provenance)
    lines = [f"### `{name}`", "",
             f"{spec.attention_dir}, {spec.layout} layout, reads the {spec.readout} rows; "
             f"{spec.n_layers} layers of {list(spec.heads)} heads; exact (float64 max error "
             f"< {constructions.REGISTER_TOL:g}) from β = {spec.beta_exact:g} at every d from "
             f"{spec.min_d} to {spec.max_d}; found in {len(prov.get('runs', ()))} runs "
             f"({', '.join(prov.get('runs', ()))}).", "",
             "| layer | head | query block | key block | template |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {c.layer + 1} | {c.head} | {c.query} | {c.key} | {c.label} |" for c in spec.cells]
    lines += ["", f"Read-out: `{spec.read_block}`.", ""]
    lines += [f"- {line}" for line in describe(spec)]
    lines += ["", f"![{name} at d = {FIGURE_D}](discovered/{name}.png)", ""]
    return lines


def draw(out: Path, found: set[str]) -> None:
    from invperm_interp.viz.heatmaps import plot_circuit, save_figures

    for name in sorted(found):
        beta = registry.get(name).beta_exact
        model = constructions.build(name, FIGURE_D, beta)
        title = f"{name} at d = {FIGURE_D}, β = {beta:g}"
        # one head a row: the page is narrower than the heads side by side
        save_figures(plot_circuit(model, title=title, columns=1),
                     output(out, f"discovered/{name}.png"))


def markdown(summary: list[dict], rows: list[dict], unnamed: dict, found: set[str],
             controls: list[dict], deep: dict) -> str:
    lines = ["# Discovered constructions, counted on held-out seeds", "",
             "What the rule names (zero ablation, 4,096 samples) with the constructions `invperm "
             "discover --register` found on discovery's own seeds, beside what it names without them "
             "(the same recorded tests), on those seeds and on seeds discovery never saw. Counts "
             "of solved runs with Wilson 95% intervals. Discovered: "
             + (", ".join(f"`{n}`" for n in sorted(found)) or "none") + ".", "",
             "| model | shape | seeds | solved | named without discovered | named with them | by a "
             "discovered one | none |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in summary:
        n = s["solved"]
        lines.append(f"| {s['kind']} | {s['shape']} | {s['seeds']} | {n} | "
                     f"{share_text(s['named_without'], n)} | {share_text(s['named'], n)} | "
                     f"{share_text(s['named_by_discovered'], n)} | {share_text(s['none'], n)} |")
    lines += ["", "## Names", ""]
    for s in summary:
        names = "; ".join(f"{k} ×{v}" for k, v in s["names"].items())
        lines.append(f"- {s['kind']} {s['shape']}, {s['seeds']}: {names}")
    lines += ["", "## Controls of the discovered claims, held out", "",
              "Each held-out run a discovered construction names: its claim tested on 1,024 samples "
              "under every style beside the empty claim, 20 random cell sets of its size and every "
              "other fitting construction (`analyses/controls.py`, `analysis.controls`).", "",
              "| style | runs | empty claim rejected | random cell sets rejected | other "
              "constructions rejected | claim passes |", "| --- | --- | --- | --- | --- | --- |"]
    for c in controls:
        lines.append(f"| {c['style']} | {c['runs']} | {share_text(c['empty_rejected'], c['runs'])} | "
                     f"{share_text(c['random_rejected'], c['random_draws'])} | "
                     f"{share_text(c['others_rejected'], c['others'])} | "
                     f"{share_text(c['claim_passes'], c['empty_rejected'])} |")
    by_claim = Counter(d["claim"] for d in deep.values())
    passes = Counter(d["claim"] for d in deep.values() if d["deep"] == "faithful")
    lines += ["", "Scrubbed to the bottom of the recursion (`analysis.treeify`: each claimed cell fed "
              "from its partner's run scrubbed in turn; same samples), the claim is faithful in "
              + share_text(sum(passes.values()), len(deep)) + " of these runs ("
              + "; ".join(f"`{c}` {passes[c]} of {n}" for c, n in sorted(by_claim.items()))
              + f"); at one level in {sum(d['one'] == 'faithful' for d in deep.values())}."]
    lines += ["", "## The discovered constructions", ""]
    for name in sorted(found):
        lines += construction_section(name)
    lines += ["", "## Held-out runs left unnamed", ""]
    if not unnamed:
        lines.append("None.")
    by_run = {r["run"]: r for r in rows if r["seeds"] == "held-out"}
    for key, info in sorted(unnamed.items()):
        r, ideal = by_run[key], info["idealised"]
        proof = r.get("minimal_proof") or ("provably smallest" if r["minimal_optimal"] else "")
        circuit = (f"minimal circuit of {r['minimal_cells']} cells"
                   f"{f' ({proof})' if proof else ''}"
                   if r["minimal_faithful"] else "no faithful minimal circuit among its atoms' cells")
        best = ("" if r["best_recovered"] is None
                else f"; the best construction tested recovers {r['best_recovered']:.0%} of the loss")
        if ideal is None:
            what = ""
        elif ideal["exact"]:
            what = (f"; its circuit idealises to an exact form of {len(ideal['cells'])} cells "
                    f"(not registered: discovery ran on other seeds)")
        else:
            what = f"; no exact form near its circuit: {ideal['reason']}"
        lines.append(f"- {key} ({r['kind']} {r['shape']}, {r['name']}): {circuit}{best}{what}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("discovery_runs", type=Path, help="the sweep folder discovery ran on")
    parser.add_argument("heldout_runs", type=Path, help="the held-out sweep folder")
    add_output_arguments(parser, "the held-out runs folder")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    found = registry.discovered_names()
    try:
        out = output_folder(args, args.heldout_runs)
        own, _ = run_rows(args.discovery_runs, "discovery's", found)
        held, unnamed = run_rows(args.heldout_runs, "held-out", found)
    except ValueError as err:
        return refuse("discovery_census", err)
    if not held:
        return refuse("discovery_census", f"{args.heldout_runs} holds no solved, analysed run")
    rows = own + held
    summary = summarize(rows, found)
    held_controls = control_rows(args.heldout_runs, rows, found)
    controls = control_summary(held_controls)
    deep = {r["run"]: treeified_row(args.heldout_runs / r["run"]) for r in held_controls}
    characterised = characterise(unnamed)
    draw(out, found)
    data = {"discovered": sorted(found), "summary": summary, "controls": controls,
            "treeified": deep, "runs": rows, "unnamed": characterised}
    output(out, "discovery_census.json").write_text(json.dumps(data, indent=1) + "\n")
    output(out, "discovery_census.md").write_text(markdown(summary, rows, characterised, found,
                                                           controls, deep))
    print(f"wrote {out / 'discovery_census.json'} and {out / 'discovery_census.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
