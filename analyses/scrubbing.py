"""Claim: which test says "this circuit is the mechanism" of a causal-scratch model.

Runs of analyses/grids/scrubbing.toml (causal scratch, d = 10, the census's training settings),
each re-analysed on the census's 4,096 evaluation samples (seed 12345): the rule's name under zero,
mean and resample ablation (the sweep's mechanism.json) and under causal scrubbing (each claimed
cell of a registered construction fed from the partner of what it reads, ``analysis.readings``;
the guard-added claims, which are not registered, from a partner with the same P and another Y;
the rest of ``A`` from another input: ``analysis.scrub``); the claim's scores
under each style; the model with the claim removed under each style (completeness); and the cells
outside the claim that path patching finds missing (each restored alone, the rest resampled or
scrubbed). The claim of a run the rule does not name is ``theorem3_superposed``, the family the
census finds in most scratch circuits. Writes scrubbing.{json,md} next to the runs (the sweep
folder), or into ``--out DIR``, or into the checkout's assets/ with ``--update-assets`` (as
``make scrubbing`` does). A folder holding no analysed run is refused before anything is written.

Run: invperm sweep analyses/grids/scrubbing.toml --out runs/scrubbing --workers 1
     python analyses/scrubbing.py runs/scrubbing [--update-assets]   (each run's row is kept in its
     run folder's scrubbing.json)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import torch
from census_report import share_text
from common import add_output_arguments, output, output_folder, refuse

from invperm_interp import HookedDisentangledTransformer
from invperm_interp.analysis.compare import candidates
from invperm_interp.analysis.faithfulness import Tester
from invperm_interp.analysis.hypothesis import Hypothesis, as_hypothesis
from invperm_interp.analysis.mechanism import (
    SCREEN_SAMPLES,
    name_by_rule,
    paired_with_best,
    ranked,
    test_constructions,
    test_empty,
    verdict_of,
)
from invperm_interp.analysis.scrub import STYLES, cell_patching, completeness, scrub, scrub_tester
from invperm_interp.analysis.sweep_record import SweepRecord
from invperm_interp.analysis.treeify import treeified
from invperm_interp.analysis.verdict import UNNAMED, evaluation_batch, judge
from invperm_interp.maths import constructions, registry

SAMPLES, SEED = 4096, 12345  # the census's evaluation batch
PATCH_SAMPLES = 1024  # path patching runs one variant per cell: a quarter of the batch
FAMILY = "theorem3_superposed"  # the claim tested on a run the rule does not name
TOP = 3  # cells listed per run and style
#: The content-mass guard of layer 1, the query row's content against the P and Y_P positions and
#: against the keys' content, with the signs the guarded forms name (1 at (x, pos.P), -1 at
#: (x, pos.Y) and (x, x)): a claim's signs are checked cell by cell, so they must be the model's.
GUARD = registry.CONTENT_MASS_GUARD


def score_dict(s) -> dict:
    return {"rows_exact": s.rows_exact, "loss_recovered": s.loss_recovered,
            "recovered_se": s.recovered_se, "verdict": judge(s)}


def scrub_faithful(model, batch) -> tuple[str, list[str]]:
    """The rule's name under scrubbing and every construction faithful under it (ties included)."""
    full = scrub_tester(model, batch)
    screen = scrub_tester(model, batch.head(SCREEN_SAMPLES))
    tested = paired_with_best(screen, test_constructions(model, screen, resolve=full,
                                                         minimality=False))
    empty = test_empty(screen, full)
    return str(name_by_rule(tested, empty=empty)), [t.hypothesis for t in ranked(tested)[0]]


def plus_content_cell(model, batch) -> dict:
    """Every working construction of the layout with the layer-1 (x, x) cell added, under
    resample ablation: which claims the cell path patching finds makes faithful (by the rule's
    verdict, signs included)."""
    tester = Tester(model, batch, "resample")
    out = {}
    for name in (placed.construction for placed in candidates(model)):  # the scratch runs: 2 × 1
        if constructions.get(name).works:
            hyp = as_hypothesis(model, name)
            plus = Hypothesis(f"{name} + (x, x)", hyp.cells + GUARD[2:], hyp.read, hyp.unit)
            test = tester.test(plus, minimality=False)
            out[name] = {**score_dict(test.circuit), "verdict": verdict_of(test)}
    return out


def scrub_treeified(model, batch, claim: str) -> dict:
    """``claim`` scrubbed to the bottom of the recursion (each claimed cell fed from its partner's
    run scrubbed in turn: ``analysis.treeify`` at ``n_layers`` levels), as :func:`score_dict`."""
    tester = scrub_tester(model, batch)
    return score_dict(treeified(tester, as_hypothesis(model, claim), model.cfg.n_layers))


def treeified_positional(model, batch, claim: str) -> dict:
    """Where the recursive scrub loses: per claimed cell that the construction says reads nothing
    somewhere (positions only), the claim scrubbed to the bottom with those positions fed from the
    sample itself instead of another input, on the first ``PATCH_SAMPLES`` samples; the cell whose
    feeding recovers the most, and its gain over the claim as scrubbed."""
    tester = scrub_tester(model, batch.head(PATCH_SAMPLES))
    hyp = tester.with_reads(as_hypothesis(model, claim))
    depth = model.cfg.n_layers
    base = treeified(tester, hyp, depth).loss_recovered
    gains = []
    for i, (site, pairs) in enumerate(hyp.reads):
        if "nothing" in dict(pairs).values():
            reads = list(hyp.reads)
            reads[i] = (site, tuple((pair, "P and Y" if r == "nothing" else r) for pair, r in pairs))
            fed = treeified(tester, replace(hyp, reads=tuple(reads)), depth).loss_recovered
            gains.append((fed - base, list(site)))
    gain, cell = max(gains) if gains else (0.0, None)
    return {"base": base, "cell": cell, "gain": gain}


#: Fields added to a kept row that lacks them (a row kept before the field was measured).
EXTRA = {"scrub_faithful": lambda model, batch, row: scrub_faithful(model, batch)[1],
         "resample_plus_content": lambda model, batch, row: plus_content_cell(model, batch),
         "scrub_treeified": lambda model, batch, row: scrub_treeified(model, batch, row["claim"]),
         "treeified_positional": lambda model, batch, row: treeified_positional(model, batch,
                                                                                row["claim"])}


def analyse(run_dir: Path) -> dict:
    model = HookedDisentangledTransformer.from_run(str(run_dir))
    record = SweepRecord.read(run_dir / "mechanism.json")
    batch = evaluation_batch(model, SAMPLES, SEED)
    scrub_name, scrub_set = scrub_faithful(model, batch)
    names = {"zero": str(record.answer), "mean": str(record.under["mean"]),
             "resample": str(record.under["resample"]), "scrub": scrub_name}
    claim = names["zero"] if names["zero"] in constructions.names() else FAMILY
    hyp = as_hypothesis(model, claim)
    scores = {style: Tester(model, batch, style).circuit(hyp) for style in ("zero", "mean",
                                                                             "resample")}
    scores["scrub"] = scrub(model, hyp, batch)
    plus = Hypothesis(f"{claim} + guard", hyp.cells + GUARD, hyp.read, hyp.unit)
    guarded = {style: Tester(model, batch, style).circuit(plus) for style in ("zero", "mean",
                                                                             "resample")}
    guarded["scrub"] = scrub(model, plus, batch)
    patches = {}
    small = batch.head(PATCH_SAMPLES)
    for style in ("resample", "scrub"):
        found = cell_patching(model, hyp, small, style=style)
        patches[style] = {"base": found.base.loss_recovered,
                          "top": [{"cell": list(p.cell), "gain": found.gain(p),
                                   "loss_recovered": p.score.loss_recovered}
                                  for p in found.cells[:TOP]],
                          # the layer-1 content-query cells, where the guard the census saw sits
                          "layer1_x_query": {p.key: found.gain(p) for p in found.cells
                                             if p.layer == 0 and p.query == "x"}}
    return {"run": run_dir.name, "seed": json.loads((run_dir / "config.json").read_text()).get(
                "seed", run_dir.name.rsplit("seed", 1)[-1]),
            "names": names, "scrub_faithful": scrub_set, "claim": claim,
            "resample_plus_content": plus_content_cell(model, batch),
            "scrub_treeified": scrub_treeified(model, batch, claim),
            "treeified_positional": treeified_positional(model, batch, claim),
            "scores": {k: score_dict(v) for k, v in scores.items()},
            "with_guard": {k: score_dict(v) for k, v in guarded.items()},
            "completeness": {k: score_dict(v)
                             for k, v in completeness(model, hyp, batch).items()},
            "patching": patches}


def cell_text(cell) -> str:
    layer, head, query, key = cell
    return f"L{layer + 1}{f'h{head}' if head else ''} ({query}, {key})"


def markdown(rows: list[dict]) -> str:
    n = len(rows)
    named = lambda style: sum(r["names"][style] not in UNNAMED for r in rows)  # noqa: E731
    faithful = lambda key, style: sum(r[key][style]["verdict"] == "faithful" for r in rows)  # noqa: E731
    lines = [
        "# Causal scrubbing of the scratch circuits", "",
        f"{n} causal-scratch d = 10 runs trained with the census's settings "
        "(analyses/grids/scrubbing.toml: Adam lr 1e-2, batch 128, stopped at MSE < 1e-3), each on the "
        "census's 4,096 evaluation samples (seed 12345); written by analyses/scrubbing.py, read in "
        "docs/results/scrubbing.md. **name**: the rule's name under each style (scrub: each claimed cell "
        "fed from the partner of what it reads, assets/readings.md; a claim that is not a registered "
        "construction from a partner with the same P and another Y; the rest of A from another input, "
        "`analysis.scrub`). **claim**: the "
        "zero-ablation name, or theorem3_superposed where the rule names none; **+ guard**: the "
        "claim with the three layer-1 content-query cells (x, pos.P), (x, pos.Y), (x, x) added. "
        "**without**: the loss recovered by the model with the claim removed (completeness; under "
        "scrub the claim is fed from another P and the same Y). **missing cell**: the cell outside "
        "the claim whose adding alone recovers the most loss, the rest resampled or scrubbed "
        "(1,024 of the samples). Counts carry Wilson 95% intervals.", "",
        "| style | runs named | claim faithful | claim + guard faithful | median loss recovered "
        "without the claim |", "| --- | --- | --- | --- | --- |"]
    for style in STYLES:
        left = sorted(r["completeness"][style]["loss_recovered"] for r in rows)
        median = (left[(n - 1) // 2] + left[n // 2]) / 2
        counts = [share_text(k, n) for k in (named(style), faithful("scores", style),
                                             faithful("with_guard", style))]
        lines.append(f"| {style} | {' | '.join(counts)} | {median:.3f} |")
    deep = [r["scrub_treeified"] for r in rows]
    recovered = sorted(d["loss_recovered"] for d in deep)
    moved = max(abs(d["loss_recovered"] - r["scores"]["scrub"]["loss_recovered"])
                for d, r in zip(deep, rows))
    lines += ["", f"Scrubbed to the bottom of the recursion (each claimed cell fed from its "
              f"partner's run scrubbed in turn, two levels on these two-layer models): the claim is "
              f"faithful in {share_text(sum(d['verdict'] == 'faithful' for d in deep), n)} "
              f"(one level: {share_text(faithful('scores', 'scrub'), n)}), recovering "
              f"{recovered[0]:.3f} to {recovered[-1]:.3f} of the loss; the largest change from one "
              f"level is {moved:.3f}. By claim: " + "; ".join(
                  f"{c} {sum(d['verdict'] == 'faithful' for d, r in zip(deep, rows) if r['claim'] == c)}"
                  f" of {sum(r['claim'] == c for r in rows)}"
                  for c in sorted({r['claim'] for r in rows})) + "."]
    found = [r["treeified_positional"] for r in rows]
    cells = Counter(cell_text(f["cell"]) for f in found if f["cell"] and f["gain"] > 0.01)
    lines += ["", "Where it loses (first 1,024 samples): per claimed cell that the construction says "
              "reads nothing somewhere, those positions fed from the sample itself instead of another "
              "input; the cell that recovers the most, where it recovers more than 0.01: "
              + ("; ".join(f"{c} in {k} runs" for c, k in cells.most_common()) or "none")
              + f" (gains {min(f['gain'] for f in found):+.3f} to {max(f['gain'] for f in found):+.3f})."]
    names = sorted({k for r in rows for k in r["resample_plus_content"]})
    lines += ["", "Each working construction of the layout with the layer-1 (x, x) cell added (the cell "
              "path patching finds), under resample ablation:", "",
              "| construction + (x, x) | faithful under resample | faithful under scrub (alone) |",
              "| --- | --- | --- |"]
    for name in names:
        k = sum(r["resample_plus_content"][name]["verdict"] == "faithful" for r in rows)
        lines.append(f"| {name} | {share_text(k, n)} | "
                     f"{share_text(sum(name in r['scrub_faithful'] for r in rows), n)} |")
    lines += ["", "| run | name: zero / mean / resample / scrub | constructions faithful under scrub | "
              "claim | recovered: zero / mean / resample / scrub | + guard: zero / mean / resample / scrub "
              "| without: zero / mean / resample / scrub | missing cell (resample: gain) | "
              "missing cell (scrub: gain) |", "|" + " --- |" * 9]
    for r in rows:
        rec = " / ".join(f"{r['scores'][s]['loss_recovered']:.3f}" for s in STYLES)
        plus = " / ".join(f"{r['with_guard'][s]['loss_recovered']:.3f}" for s in STYLES)
        wo = " / ".join(f"{r['completeness'][s]['loss_recovered']:.2f}" for s in STYLES)
        miss = [(f"{cell_text(p['top'][0]['cell'])}: +{p['top'][0]['gain']:.3f}" if p["top"]
                 else "-") for p in (r["patching"]["resample"], r["patching"]["scrub"])]
        lines.append(f"| {r['run']} | " + " / ".join(r["names"][s] for s in STYLES)
                     + f" | {len(r['scrub_faithful'])} | {r['claim']} | {rec} | {plus} | {wo} | "
                     f"{miss[0]} | {miss[1]} |")
    return "\n".join(lines) + "\n"


def analysed_runs(folder: Path) -> list[Path]:
    """The sweep's ``scratch_d10_seed*`` runs with a ``mechanism.json`` (analysed), by seed."""
    return sorted((p for p in folder.glob("scratch_d10_seed*") if (p / "mechanism.json").is_file()),
                  key=lambda p: int(p.name.rsplit("seed", 1)[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", type=Path, help="the sweep folder of analyses/grids/scrubbing.toml")
    add_output_arguments(parser, "the runs folder")
    args = parser.parse_args(argv)
    try:
        out = output_folder(args, args.runs)
    except ValueError as err:
        return refuse("scrubbing", err)
    run_dirs = analysed_runs(args.runs)
    if not run_dirs:
        return refuse("scrubbing", f"runs: {args.runs} holds no analysed run (scratch_d10_seed*/"
                      "mechanism.json): expected the sweep folder of analyses/grids/scrubbing.toml")
    torch.set_num_threads(1)
    rows = []
    for run_dir in run_dirs:
        cached = run_dir / "scrubbing.json"  # one run's row, kept so a rerun resumes
        if not cached.is_file():
            cached.write_text(json.dumps(analyse(run_dir), indent=2) + "\n")
        row = json.loads(cached.read_text())
        missing = [key for key in EXTRA if key not in row]
        if missing:
            model = HookedDisentangledTransformer.from_run(str(run_dir))
            batch = evaluation_batch(model, SAMPLES, SEED)
            row.update({key: EXTRA[key](model, batch, row) for key in missing})
            cached.write_text(json.dumps(row, indent=2) + "\n")
        rows.append(row)
        print(rows[-1]["run"], rows[-1]["names"], flush=True)
    output(out, "scrubbing.json").write_text(json.dumps(rows, indent=2) + "\n")
    output(out, "scrubbing.md").write_text(markdown(rows))
    print(f"wrote {out / 'scrubbing.json'} and {out / 'scrubbing.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
