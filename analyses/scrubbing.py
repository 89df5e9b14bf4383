"""Claim: which test says "this circuit is the mechanism" of a causal-scratch model.

Runs of analyses/grids/scrubbing.toml (causal scratch, d = 10, the census's training settings),
each re-analysed on the census's 4,096 evaluation samples (seed 12345): the rule's name under zero,
mean and resample ablation (the sweep's mechanism.json) and under causal scrubbing (the rest of
``A`` fed from a partner with the same P and another Y: ``analysis.scrub``); the claim's scores
under each style; the model with the claim removed under each style (completeness); and the cells
outside the claim that path patching finds missing (each restored alone, the rest resampled or
scrubbed). The claim of a run the rule does not name is ``theorem3_superposed``, the family the
census finds in most scratch circuits. Writes assets/scrubbing.{json,md}.

Run: invperm sweep analyses/grids/scrubbing.toml --out runs/scrubbing --workers 1
     python analyses/scrubbing.py runs/scrubbing
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from common import asset

from invperm_interp import HookedDisentangledTransformer
from invperm_interp.analysis.faithfulness import Tester
from invperm_interp.analysis.hypothesis import Hypothesis, as_hypothesis
from invperm_interp.analysis.mechanism import name_on
from invperm_interp.analysis.scrub import STYLES, cell_patching, completeness, partner_input, scrub
from invperm_interp.analysis.sweep_record import SweepRecord
from invperm_interp.analysis.verdict import evaluation_batch, judge
from invperm_interp.maths import constructions

SAMPLES, SEED = 4096, 12345  # the census's evaluation batch
PATCH_SAMPLES = 1024  # path patching runs one variant per cell: a quarter of the batch
FAMILY = "theorem3_superposed"  # the claim tested on a run the rule does not name
TOP = 3  # cells listed per run and style
#: The content-mass guard of layer 1: the query row's content against the P and Y_P positions
#: and against the keys' content (the census's +0.4 at (x, pos.P), -0.3 at (x, pos.Y)).
GUARD = tuple((0, 0, "x", key, "1") for key in ("pos.P", "pos.Y", "x"))


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson 95% interval of a share ``k / n``."""
    if n == 0:
        return 0.0, 1.0
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def share(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k} of {n} ({lo:.0%}–{hi:.0%})"


def score_dict(s) -> dict:
    return {"rows_exact": s.rows_exact, "loss_recovered": s.loss_recovered,
            "recovered_se": s.recovered_se, "verdict": judge(s)}


def analyse(run_dir: Path) -> dict:
    model = HookedDisentangledTransformer.from_run(str(run_dir))
    record = SweepRecord.read(run_dir / "mechanism.json")
    batch = evaluation_batch(model, SAMPLES, SEED)
    names = {"zero": str(record.answer), "mean": str(record.under["mean"]),
             "resample": str(record.under["resample"]),
             "scrub": str(name_on(model, batch, ablation="resample",
                                  reference=partner_input(batch, "P")))}
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
            "names": names, "claim": claim,
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
    named = lambda style: sum(r["names"][style] not in ("none", "borderline") for r in rows)  # noqa: E731
    lines = [
        "# Causal scrubbing of the scratch circuits", "",
        f"{n} causal-scratch d = 10 runs trained with the census's settings "
        "(analyses/grids/scrubbing.toml: Adam lr 1e-2, batch 128, stopped at MSE < 1e-3), each on the "
        "census's 4,096 evaluation samples (seed 12345). **name**: the rule's name under each style "
        "(scrub: the rest of A fed from a partner with the same P and another Y, "
        "`analysis.scrub`). **claim**: the zero-ablation name, or theorem3_superposed where the rule "
        "names none; its loss recovered under each style, the model without it under each style "
        "(completeness: the loss recovered left), and the cell outside the claim whose restoring "
        "recovers the most under resampling and under scrubbing (on 1,024 of the samples). "
        "Counts carry Wilson 95% intervals.", "",
        "| style | runs named | runs whose claim is faithful | median loss recovered without "
        "the claim |", "| --- | --- | --- | --- |"]
    for style in STYLES:
        faithful = sum(r["scores"][style]["verdict"] == "faithful" for r in rows)
        left = sorted(r["completeness"][style]["loss_recovered"] for r in rows)
        lines.append(f"| {style} | {share(named(style), n)} | {share(faithful, n)} | "
                     f"{left[len(left) // 2]:.3f} |")
    lines += ["", "| run | zero | mean | resample | scrub | claim | recovered zero / mean / "
              "resample / scrub | without: zero / mean / resample / scrub | missing cell "
              "(resample: gain) | missing cell (scrub: gain) |",
              "|" + " --- |" * 10]
    for r in rows:
        rec = " / ".join(f"{r['scores'][s]['loss_recovered']:.3f}" for s in STYLES)
        wo = " / ".join(f"{r['completeness'][s]['loss_recovered']:.2f}" for s in STYLES)
        miss = [(f"{cell_text(p['top'][0]['cell'])}: +{p['top'][0]['gain']:.3f}" if p["top"]
                 else "-") for p in (r["patching"]["resample"], r["patching"]["scrub"])]
        lines.append(f"| {r['run']} | " + " | ".join(r["names"][s] for s in STYLES)
                     + f" | {r['claim']} | {rec} | {wo} | {miss[0]} | {miss[1]} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", type=Path, help="the sweep folder of analyses/grids/scrubbing.toml")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for run_dir in sorted(args.runs.glob("scratch_d10_seed*"),
                          key=lambda p: int(p.name.rsplit("seed", 1)[-1])):
        if (run_dir / "mechanism.json").is_file():
            rows.append(analyse(run_dir))
            print(rows[-1]["run"], rows[-1]["names"], flush=True)
    asset("scrubbing.json").write_text(json.dumps(rows, indent=2) + "\n")
    asset("scrubbing.md").write_text(markdown(rows))
    print("wrote assets/scrubbing.json and assets/scrubbing.md")


if __name__ == "__main__":
    main()
