"""Minimal circuits under mean ablation, for the solved runs of sweeps: what a zero-ablation "none"
leaves out.

The rule and the minimal-circuit search test a circuit with every cell outside it zeroed (in the
gauge-fixed frame). Under mean ablation a cell outside it keeps its mean score contribution (over
reference samples) and loses only its sample-to-sample variation. For each solved run of each
sweep folder (``sweep.jsonl``) whose name starts with ``--prefix``, at most ``--per-group`` per
variant and heads per layer, in grid order, this runs on the sweep's own evaluation samples:

- the minimal-circuit search (``analysis.minimal``) with the cells outside each set mean-ablated,
  started from the constructions faithful under mean ablation, on the first 512 samples (the
  samples the zero-ablation search uses; the reference is the sweep's mean-ablation reference);
- the final layer alone: every cell of the final layer kept, every earlier layer's scores at their
  mean (an attention that no longer depends on the input), at zero, or resampled (each sample's
  taken on another input): whether the model needs its earlier layers' input-dependent attention
  at all. A first layer that attends by position alone (``two_block``'s, ``appendix_b``'s) is its
  own mean: its final layer alone at the mean is the whole model.

Writes OUT (JSON): per run, the zero-ablation name and minimal circuit from its sweep record
beside these, and a summary per setting, model and d, also as markdown (``.md``) and the final layer alone
per run as a figure (``.png``) beside it. Resumable: runs already in OUT are not redone. An OUT in
the checkout's assets/ is written only with ``--update-assets`` (as ``make census-standard`` does).

    python analyses/minimal_under_mean.py runs/census_standard --out runs/minimal_under_mean.json
    python analyses/minimal_under_mean.py runs/census_standard --out assets/minimal_under_mean.json \
        --update-assets
    python analyses/minimal_under_mean.py runs/census --per-group 4 \
        --out assets/minimal_under_mean.json --update-assets
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import in_assets
from tqdm import tqdm

from invperm_interp.sweep.collect import read_sweep

ALONE_STYLES = ("zero", "mean", "resample")


def chosen_runs(rows: list[dict], prefix: str, per_group: int) -> list[dict]:
    """The first ``per_group`` solved runs named ``prefix…`` of each (variant, heads per layer)
    among a sweep's ``rows`` (``sweep.jsonl``), in grid order."""
    taken: dict[tuple, int] = {}
    out = []
    for row in rows:
        if not row["name"].startswith(prefix) or row["steps_to_solve"] is None or not row.get("analysis"):
            continue
        group = (row["variant"], row["model"].get("n_heads", 1))
        if taken.get(group, 0) < per_group:
            taken[group] = taken.get(group, 0) + 1
            out.append(row)
    return out


def setting(row: dict) -> str:
    """``"causal scratch"``, ``"bidirectional"`` or ``"causal"``: the attention and whether the
    layout has scratch rows, from a sweep row's model configuration."""
    model = row["model"]
    attention = model["attention_dir"]
    return f"{attention} scratch" if any(s[0] == "S" for s in model["layout"]["segments"]) else attention


def last_layer_cells(model) -> list:
    """Every (head, query block, key block) cell of the final layer, as ``AtomCell``s (their label
    is a placeholder: a hypothesis of ``unit="cells"`` keeps whatever each cell holds)."""
    from invperm_interp.analysis.hypothesis import AtomCell

    layer = model.cfg.n_layers - 1
    blocks = [b.name for b in model.stream.blocks(layer)]
    return [AtomCell(layer, head, q, k, "I") for head in range(model.cfg.heads[layer])
            for q in blocks for k in blocks]


def examine(run_dir: Path, row: dict) -> dict:
    """The run's minimal circuit under mean ablation and its final layer alone (module docstring)."""
    from invperm_interp.analysis.faithfulness import Tester
    from invperm_interp.analysis.hypothesis import Hypothesis
    from invperm_interp.analysis.mechanism import SCREEN_SAMPLES, tested_on
    from invperm_interp.analysis.minimal import minimal_circuit
    from invperm_interp.analysis.sweep_record import SweepRecord
    from invperm_interp.analysis.templates import explain
    from invperm_interp.analysis.verdict import RULE, evaluation_batch
    from invperm_interp.sweep.tasks import reference_batch
    from invperm_interp.training.run import Run

    record = SweepRecord.from_dict(row["analysis"])
    run = Run.load(run_dir)
    model = run.analysis_model
    batch = evaluation_batch(model, record.samples, record.seed)
    reference = reference_batch("mean", model, record.samples, record.seed + record.batches)
    tested = tested_on(model, batch, ablation="mean", reference=reference)
    faithful = [t for t in tested if RULE.is_faithful(t.circuit)]
    starts, fallback = ([Hypothesis(t.hypothesis, t.cells, t.read, t.unit) for t in faithful
                         if t.signs_agree == agree] for agree in (True, False))
    first = batch.head(SCREEN_SAMPLES)  # the samples the rule's own minimal-circuit search uses
    mean = Tester(model, first, "mean", reference)
    found = minimal_circuit(model, first, circuit=explain(model), tester=mean, starts=starts,
                            fallback=fallback)
    zero_minimal = record.mechanism.minimal
    return {
        "run": run_dir.name, "folder": run_dir.parent.name, "variant": row["variant"],
        "setting": setting(row), "architecture": run.model.cfg.arch, "heads": list(model.cfg.heads),
        "d": model.cfg.d,
        "zero": {"name": str(record.answer),
                 "minimal": {"faithful": zero_minimal.faithful, "size": zero_minimal.size,
                             "candidates": zero_minimal.candidates}},
        "mean": {"name": str(record.under["mean"]) if "mean" in record.under else None,
                 "minimal": {"faithful": found.faithful, "size": found.size,
                             "optimal": found.optimal, "candidates": found.candidates,
                             "cells": [list(c) for c in found.cells], "read": list(found.read),
                             "weight_share": found.weight_share,
                             "rows_exact": found.score.rows_exact,
                             "loss_recovered": found.score.loss_recovered}},
        "final_layer_alone": final_layer_alone(model, record),
    }


def alone_of(run_dir: Path, row: dict) -> dict:
    """:func:`final_layer_alone` of the run in ``run_dir`` (its sweep row ``row``)."""
    from invperm_interp.analysis.sweep_record import SweepRecord
    from invperm_interp.training.run import Run

    return final_layer_alone(Run.load(run_dir).analysis_model, SweepRecord.from_dict(row["analysis"]))


def final_layer_alone(model, record) -> dict:
    """The final layer alone (every earlier layer's scores at zero, at their mean over the sweep's
    mean reference, or each sample's at its resample reference's) on the first
    ``mechanism.SCREEN_SAMPLES`` samples of the run's evaluation batch: rows exact, loss recovered
    and the rule's verdict, per ablation style."""
    from invperm_interp.analysis.faithfulness import Tester
    from invperm_interp.analysis.hypothesis import Hypothesis
    from invperm_interp.analysis.mechanism import SCREEN_SAMPLES
    from invperm_interp.analysis.verdict import RULE, evaluation_batch
    from invperm_interp.sweep.tasks import reference_batch

    first = evaluation_batch(model, record.samples, record.seed).head(SCREEN_SAMPLES)
    last = Hypothesis("final layer alone", tuple(last_layer_cells(model)), None, "cells")
    out = {}
    for style in ALONE_STYLES:
        reference = (None if style == "zero" else
                     reference_batch(style, model, record.samples, record.seed + record.batches))
        s = Tester(model, first, style, reference).circuit(last)
        out[style] = {"rows_exact": s.rows_exact, "loss_recovered": s.loss_recovered,
                      "faithful": RULE.is_faithful(s)}
    return out


def model_label(run: dict) -> str:
    """``"standard, 2 heads"``, ``"disentangled, 1 head"``: the architecture and heads per layer."""
    heads = run["heads"][0]
    return f"{run['architecture']}, {heads} head{'s' if heads > 1 else ''}"


def group_of(run: dict) -> tuple[str, str, int]:
    """``(setting, model label, d)``: the summary's rows and the figure's columns."""
    return run["setting"], model_label(run), run["d"]


def summary(runs: list[dict]) -> list[dict]:
    """Per setting, model kind and d, in that order: how many runs the rule names under zero ablation, how
    many have a faithful minimal circuit under zero and under mean ablation (with the sizes under
    mean), and in how many the final layer alone is faithful under mean and under zero ablation."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault(group_of(run), []).append(run)
    rows = []
    for (where, label, d), members in sorted(groups.items()):
        n = len(members)
        sizes = [r["mean"]["minimal"]["size"] for r in members if r["mean"]["minimal"]["faithful"]]
        rows.append({
            "setting": where, "model": label, "d": d, "runs": n,
            "named (zero)": sum(r["zero"]["name"] not in ("none", "borderline") for r in members),
            "minimal faithful (zero)": sum(r["zero"]["minimal"]["faithful"] for r in members),
            "minimal faithful (mean)": len(sizes),
            "proved smallest (mean)": sum(r["mean"]["minimal"]["faithful"] and r["mean"]["minimal"]["optimal"]
                                          for r in members),
            "minimal size (mean)": ("–" if not sizes else str(min(sizes)) if min(sizes) == max(sizes)
                                    else f"{min(sizes)}–{max(sizes)}"),
            "final layer alone (mean)": sum(r["final_layer_alone"]["mean"]["faithful"] for r in members),
            "final layer alone (resample)": (
                sum(r["final_layer_alone"]["resample"]["faithful"] for r in members)
                if all("resample" in r["final_layer_alone"] for r in members) else "–"),
            "final layer alone (zero)": sum(r["final_layer_alone"]["zero"]["faithful"] for r in members),
        })
    return rows


def markdown(rows: list[dict]) -> str:
    """The summary as a markdown table."""
    if not rows:
        return "(no runs)\n"
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


HEADING = """\
# Minimal circuits under mean ablation

Solved {settings} runs (analyses/minimal_under_mean.py): the rule's name and minimal circuit
under zero ablation (from each run's sweep record) beside the minimal-circuit search with the cells
outside each set mean-ablated (their scores at their mean over the sweep's reference samples), on
the first 512 samples of the run's evaluation batch. *Proved smallest*: the exact search tried every
smaller set. *Final layer alone*: every cell of the last layer kept, every earlier layer's scores
at their mean (an attention that no longer depends on the input), resampled (each sample's taken
on another input) or at zero; faithful means rows
exact >= {rows:.0%} and loss recovered >= {recovered:.0%}, as the rule's test.

"""


def figure(runs: list[dict], path: Path) -> None:
    """Per run, the final layer alone's rows exact with the earlier layers' scores at their mean
    (filled), resampled (crosses) and at zero (hollow): a panel per setting, a column per model and
    d, the rule's rows threshold drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from invperm_interp.analysis.verdict import RULE

    settings = sorted({r["setting"] for r in runs})
    panels = [sorted({group_of(r) for r in runs if r["setting"] == where}) for where in settings]
    width = max(5.0, 0.75 * max(len(p) for p in panels) + 1.4)
    fig, axes = plt.subplots(len(settings), 1, figsize=(width, 0.6 + 2.7 * len(settings)),
                             squeeze=False)
    for ax, where, groups in zip(axes[:, 0], settings, panels):
        for x, group in enumerate(groups):
            members = [r for r in runs if group_of(r) == group]
            spread = [(i - (len(members) - 1) / 2) * min(0.5 / max(len(members), 1), 0.04)
                      for i in range(len(members))]
            for style, face, marker, label in (
                    ("mean", "#1f77b4", "o", "earlier layers' scores at their mean"),
                    ("resample", "#d62728", "x", "resampled"),
                    ("zero", "none", "o", "at zero")):
                ax.scatter([x + s for s in spread],
                           [r["final_layer_alone"][style]["rows_exact"] for r in members], s=16,
                           marker=marker, linewidths=0.8, label=label if x == 0 else None,
                           **({"c": face} if marker == "x" else {"facecolors": face,
                                                                 "edgecolors": "#1f77b4"}))
        ax.axhline(RULE.rows, color="#888888", lw=0.8, ls="--",
                   label=f"rule: rows exact ≥ {RULE.rows:.0%}")
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([f"{label.replace(', ', chr(10))}\nd = {d}" for _, label, d in groups],
                           fontsize=7)
        ax.set_xlim(-0.6, len(groups) - 0.4)
        ax.set_ylabel("rows exact, final layer alone", fontsize=8)
        ax.set_ylim(-0.02, 1.05)
        ax.set_title(f"{where} runs", fontsize=8, loc="left")
    height = fig.get_figheight()
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.suptitle("The final layer alone, earlier layers' scores at their mean, resampled or at zero",
                 fontsize=9, x=0.01, y=1 - 0.05 / height, ha="left", va="top")
    fig.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(0.01, 1 - 0.25 / height),
               ncol=4, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / height))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def write(path: Path, runs: list[dict]) -> str:
    """OUT (JSON: the summary and every run), its summary as markdown beside it (``.md``) and the
    final layer alone per run as a figure (``.png``); returns the summary's markdown table."""
    from invperm_interp.analysis.verdict import RULE

    rows = summary(runs)
    path.write_text(json.dumps({"summary": rows, "runs": runs}, indent=1) + "\n")
    settings = " and ".join(sorted({r["setting"] for r in runs}))
    table = markdown(rows)
    path.with_suffix(".md").write_text(HEADING.format(settings=settings, rows=RULE.rows,
                                                      recovered=RULE.recovered) + table)
    figure(runs, path.with_suffix(".png"))
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="sweep folders (with sweep.jsonl)")
    parser.add_argument("--prefix", default="", help="only the runs whose names start so (default: all)")
    parser.add_argument("--per-group", type=int, default=1000,
                        help="at most this many solved runs per variant and heads per layer")
    parser.add_argument("--out", type=Path, required=True, help="the JSON file written")
    parser.add_argument("--update-assets", action="store_true",
                        help="allow an OUT in the checkout's assets/ (the committed tables)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    if args.per_group < 1:
        parser.error(f"--per-group must be at least 1, got {args.per_group}")
    if in_assets(args.out) and not args.update_assets:
        parser.error(f"--out {args.out} is in assets/: pass --update-assets to rewrite the committed "
                     "assets, or choose another file")
    import torch

    torch.set_num_threads(args.threads)
    done = json.loads(args.out.read_text())["runs"] if args.out.is_file() else []
    seen = {(r["folder"], r["run"]) for r in done}
    try:
        sweeps = {folder: [row for _, row in read_sweep(folder)] for folder in args.folders}
    except ValueError as err:
        parser.error(str(err))
    todo = [(folder / row["name"], row) for folder, rows in sweeps.items()
            for row in chosen_runs(rows, args.prefix, args.per_group)
            if (folder.name, row["name"]) not in seen]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    by_name = {(folder.name, row["name"]): (folder, row) for folder, rows in sweeps.items()
               for row in rows}
    for run in done:  # records written before runs were grouped by setting
        if "setting" not in run and (run["folder"], run["run"]) in by_name:
            run["setting"] = setting(by_name[run["folder"], run["run"]][1])
    lacking = sorted({r["folder"] for r in done if "setting" not in r})
    if lacking:
        parser.error(f"{args.out} holds runs recorded before runs were grouped by setting: give their "
                     f"sweep folders ({', '.join(lacking)}) too, once, to bring it up to date")
    older = [r for r in done if set(r["final_layer_alone"]) != set(ALONE_STYLES)
             and (r["folder"], r["run"]) in by_name]
    try:
        for run in tqdm(older, desc="final layer alone, every style", unit="run"):
            folder, row = by_name[run["folder"], run["run"]]
            run["final_layer_alone"] = alone_of(folder / row["name"], row)
        for run_dir, row in tqdm(todo, desc="minimal circuits under mean ablation", unit="run"):
            done.append(examine(run_dir, row))
            args.out.write_text(json.dumps({"runs": done}, indent=1) + "\n")  # after each run
    except KeyboardInterrupt:
        args.out.write_text(json.dumps({"runs": done}, indent=1) + "\n")
        print(f"minimal_under_mean: stopped; {len(done)} runs kept in {args.out}: rerun the same "
              "command to resume", file=sys.stderr)
        sys.exit(130)
    print(write(args.out, done), end="")
    print(f"{len(done)} runs in {args.out}")


if __name__ == "__main__":
    main()
