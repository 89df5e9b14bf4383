"""Negative controls of every test style on held-out runs: can the test reject a wrong claim here?

For each analysed run of a sweep (``analyses/grids/controls.toml``: the census's models at every
d of the census, on seeds 1000-1015, which no construction was designed on), its claim (the
construction the rule names under zero ablation, else the first it tested) is tested under zero,
mean and resample ablation and causal scrubbing beside the empty claim, ``DRAWS`` random cell sets
of its size and every other construction fitting the model (``analysis.controls``), on ``SAMPLES``
samples of seed ``SEED``. A style that does not reject the empty claim on a run cannot test that
run. The held-out runs' names under each style (the sweep's records, the empty claim checked) stand
beside the census's in-sample names of the same configuration (``assets/census.json``), one row per
model, ``d`` and style; each run also keeps its zero-ablation name without the discovered
constructions. Writes controls.{json,md} beside the runs, into ``--out DIR``, or into the
checkout's assets/ with ``--update-assets``.

Run: invperm sweep analyses/grids/controls.toml --out runs/controls
     python analyses/controls.py runs/controls [--update-assets]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import torch
from census_report import share_text
from common import add_output_arguments, output, output_folder, refuse

from invperm_interp.analysis.controls import CONTROL_STYLES, controls
from invperm_interp.analysis.mechanism import name_by_rule
from invperm_interp.analysis.placements import fits, fitting_names
from invperm_interp.analysis.sweep_record import SweepRecord
from invperm_interp.analysis.verdict import evaluation_batch
from invperm_interp.maths import registry
from invperm_interp.sweep.collect import read_rows
from invperm_interp.training.run import Run

SAMPLES, SEED, DRAWS = 1024, 12345, 20
CENSUS = Path(__file__).resolve().parent.parent / "assets" / "census.json"  # the in-sample names
KINDS = {"bidirectional": "bidirectional [P; Y_P]", "scratch": "causal scratch [P; Y_P; S]"}


def claim_of(record: SweepRecord):
    """The run's claim: the named construction's test under zero ablation (its placement kept),
    else the first the rule tested (the closest)."""
    mech = record.mechanism
    test = mech.faithfulness if mech.faithfulness is not None else (mech.tested[0] if mech.tested else None)
    return test


def names_of(record: SweepRecord) -> dict:
    """The run's name under each style by the rule as it is now, from its recorded tests, and under
    zero ablation with the discovered constructions left out (``zero without discovered``)."""
    names = {style: str(name_by_rule(tests, empty=record.empty(style)))
             for style, tests in (("zero", record.mechanism.tested), *record.tested_under.items())}
    names["zero without discovered"] = str(record.answer_without(registry.discovered_names()))
    return names


def run_row(run_dir: Path, record: SweepRecord, kind: str, seed: int) -> dict:
    """One run's controls under every style, with its names under each style from its record."""
    model = Run.load(run_dir).analysis_model
    batch = evaluation_batch(model, SAMPLES, SEED)
    test = claim_of(record)
    claim = test.construction
    others = [n for n in fitting_names(model.cfg, working=True) if n != claim and fits(n, model.cfg.heads)]
    found = controls(model, claim, batch, others=others, draws=DRAWS, seed=seed)
    return {"run": run_dir.name, "kind": kind, "seed": seed, "claim": claim,
            "names": names_of(record), "controls": [c.to_dict() for c in found]}


def cached_row(run_dir: Path, record: SweepRecord, kind: str, seed: int) -> dict:
    """:func:`run_row`, kept in the run's controls.json so a rerun resumes."""
    cached = run_dir / "controls.json"
    if not cached.is_file():
        cached.write_text(json.dumps(run_row(run_dir, record, kind, seed)) + "\n")
    return json.loads(cached.read_text())


def summarize(rows: list[dict], census: list[dict]) -> list[dict]:
    """Per model, ``d`` and style: runs the style can test (the empty claim rejected), random sets
    rejected, the claim supported, other constructions accepted; named runs held out (the sweep's
    answer) beside the census's in-sample count of the same model and ``d``."""
    out = []
    for kind, d in sorted({(r["kind"], r["d"]) for r in rows}, key=lambda k: (list(KINDS).index(k[0]), k[1])):
        runs = [r for r in rows if (r["kind"], r["d"]) == (kind, d)]
        sample = [r for r in census if r["kind"] == kind and r["d"] == d and r["steps_to_target"] is not None]
        in_sample = {"zero": [r["mechanism"] for r in sample],
                     "mean": [r["name_mean_ablation"] for r in sample],
                     "resample": [r["name_resample_ablation"] for r in sample]}
        for style in CONTROL_STYLES:
            cs = [next(c for c in r["controls"] if c["style"] == style) for r in runs]
            testable = sum(c["testable"] for c in cs)
            draws, rejected = sum(c["draws"] for c in cs), sum(c["random_rejected"] for c in cs)
            others = [v for c in cs for _, v in c["others"]]
            named = [r["names"].get(style) for r in runs if style in r["names"]]
            out.append({
                "model": KINDS[kind], "d": d, "style": style, "runs": len(runs),
                "empty claim rejected": share_text(testable, len(cs)),
                "random cell sets rejected": share_text(rejected, draws),
                "other constructions rejected": share_text(sum(v == "not faithful" for v in others),
                                                           len(others)),
                "claim passes where testable": share_text(
                    sum(c["testable"] and c["claim_verdict"] == "faithful" for c in cs), testable),
                "named, held out": share_text(sum(n not in (None, "none", "borderline", "untestable")
                                                  for n in named), len(named)) if named else "-",
                "named, in sample (census)": share_text(
                    sum(n not in ("none", "borderline") for n in in_sample[style]),
                    len(in_sample[style])) if style in in_sample and in_sample[style] else "-",
                "names held out": dict(Counter(named).most_common()) if named else {}})
    return out


def markdown(summary: list[dict], rows: list[dict]) -> str:
    lines = ["# Negative controls on held-out seeds", "",
             f"{len(rows)} solved runs of `analyses/grids/controls.toml` (the census's models at "
             f"d = {', '.join(str(d) for d in sorted({r['d'] for r in rows}))}, seeds "
             f"1000-1015: no construction was designed on them), each run's claim (the construction "
             f"named under zero ablation, else the closest tested) tested on {SAMPLES:,} samples of "
             f"seed {SEED} under every style beside the empty claim (no cell matters), {DRAWS} random "
             "cell sets of the claim's size per run and every other fitting construction "
             "(`analysis.controls`). A control is rejected when the rule's intervals say not "
             "faithful; a borderline one is not. Counts with Wilson 95% intervals. 'named, held "
             "out' is the rule's answer on the sweep's tests under that style (each construction "
             "screened on the first 512 of 4,096 samples and measured on all of them where an "
             "interval straddles a threshold; the empty claim checked: a style that does not reject "
             "it names nothing; ties decided by paired differences); 'in sample' the census's "
             "solved runs of the same model and d (assets/census.json: seeds 0-15, 0-63 at d = 10), "
             "whose records predate the empty-claim check. Scrubbing names nothing in a sweep: its "
             "column is the claim's control only.", ""]
    columns = [c for c in summary[0] if c != "names held out"]
    lines += ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(str(s[c]) for c in columns) + " |" for s in summary]
    lines += ["", "Names held out, per model and style:", ""]
    lines += [f"- {s['model']}, d = {s['d']}, {s['style']}: "
              + ", ".join(f"{n} ×{k}" for n, k in s["names held out"].items())
              for s in summary if s["names held out"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", type=Path, help="the sweep folder of analyses/grids/controls.toml")
    add_output_arguments(parser, "the runs folder")
    args = parser.parse_args(argv)
    try:
        out = output_folder(args, args.runs)
        records = read_rows(args.runs)
    except ValueError as err:
        return refuse("controls", err)
    torch.set_num_threads(1)
    rows = []
    for _, line in records:
        run_dir = args.runs / line.name
        record = SweepRecord.of_run(run_dir) if line.steps_to_solve is not None else None
        if record is None or claim_of(record) is None:
            continue
        kind = "bidirectional" if line.model["attention_dir"] == "bidirectional" else "scratch"
        rows.append({**cached_row(run_dir, record, kind, line.train["seed"]),
                     "d": line.model["layout"]["d"], "names": names_of(record)})
        print(rows[-1]["run"], rows[-1]["claim"], flush=True)
    if not rows:
        return refuse("controls", f"runs: {args.runs} holds no solved, analysed run")
    census = json.loads(CENSUS.read_text())["runs"]
    summary = summarize(rows, census)
    output(out, "controls.json").write_text(json.dumps({"summary": summary, "runs": rows}, indent=1) + "\n")
    output(out, "controls.md").write_text(markdown(summary, rows))
    print(f"wrote {out / 'controls.json'} and {out / 'controls.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
