"""The census's report: reads a census sweep's ``sweep.jsonl`` (``invperm sweep
analyses/grids/census.toml``, whose analysis stage recorded each run's mechanism, faithfulness and
minimal circuit) and writes ``census.{json,md,png,svg}`` next to it, or into ``assets/`` with
``--update-assets``. It trains and analyses nothing.

    python analyses/census_report.py runs/census [--update-assets]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from common import ASSETS, fmt  # noqa: E402

from invperm_interp.sweep.collect import read_sweep  # noqa: E402

KINDS = {"bidirectional": "bidirectional [P; Y_P], reads P", "scratch": "causal [P; Y_P; S], reads S"}


def census_rows(folder: Path) -> tuple[list[dict], dict[tuple[str, int], int]]:
    """One row per analysed run of the sweep, and the number of runs planned per (model, d)."""
    rows, planned = [], Counter()
    for _, record in read_sweep(folder):
        model, train = record["model"], record["train"]
        kind = "bidirectional" if model["attention_dir"] == "bidirectional" else "scratch"
        d = model["layout"]["d"]
        planned[(kind, d)] += 1
        analysis = record.get("analysis")
        if record["status"] == "unfinished" or not analysis or record["mechanism"] is None:
            continue
        final = record["final"] or {}
        rows.append({"run": record["name"], "kind": kind, "d": d, "seed": train["seed"],
                     "step": record["step"], "steps_to_target": record["steps_to_solve"],
                     "final_mse": final.get("mse"), "rows_exact": final.get("row_acc"),
                     "mechanism": record["mechanism"],
                     **{k: v for k, v in analysis.items() if k not in ("version", "samples", "seed")}})
    return rows, dict(planned)


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(rows: list[dict], planned: dict[tuple[str, int], int]) -> list[dict]:
    """One row per (kind, d): runs done, solved, median steps, mechanism counts, 'none' sizes."""
    out = []
    for kind in KINDS:
        for d in sorted({d for k, d in planned if k == kind}):
            group = [r for r in rows if r["kind"] == kind and r["d"] == d]
            if not group:
                continue
            solved = [r for r in group if r["steps_to_target"] is not None]
            counts = Counter(r["mechanism"] for r in solved)
            none = [r for r in solved if r["mechanism"] == "none"]
            named = [r for r in solved if r["mechanism"] != "none"]
            out.append({
                "model": kind, "d": d, "runs": len(group), "planned": planned[(kind, d)],
                "solved (MSE < 1e-3)": len(solved),
                "median steps to solve": _median(r["steps_to_target"] for r in solved),
                "mechanisms (of solved)": ", ".join(f"{k}: {v}" for k, v in counts.most_common()),
                "named circuit: median rows exact / loss recovered": (
                    f"{_median(r['circuit_rows_exact'] for r in named):.4f} / "
                    f"{_median(r['loss_recovered'] for r in named):.3f}" if named else "-"),
                "named and minimal": sum(bool(r["minimal_named"]) for r in named),
                "'none': minimal circuit sizes": (
                    ", ".join(f"{k} cells x{v}" for k, v in sorted(Counter(
                        r["minimal_size"] for r in none).items())) if none else "-"),
                "'none' with no faithful circuit": sum(not r["minimal_faithful"] for r in none),
            })
    return out


def plot(rows: list[dict], summary: list[dict], path: Path) -> None:
    """Left: every tested construction of every solved run, rows exact against loss recovered (the
    rule's thresholds dashed). Right: mechanism counts per configuration."""
    from invperm_interp.analysis.mechanism import FAITHFUL_RECOVERED, FAITHFUL_ROWS

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.2), width_ratios=(1, 1.15))
    names = sorted({t["name"] for r in rows for t in r["tested"]})
    # one colour per construction in both panels; grey is kept for 'none'
    palette = [f"C{i}" for i in range(10) if i != 7] + ["k", "#8c6d31", "#637939"]
    color = {name: palette[i % len(palette)] for i, name in enumerate(names)} | {"none": "0.75"}
    for name in names:
        pts = [(t["loss_recovered"], 1 - t["rows_exact"]) for r in rows for t in r["tested"]
               if t["name"] == name and t["loss_recovered"] is not None
               and r["steps_to_target"] is not None]
        if pts:
            left.scatter(*zip(*pts), s=14, alpha=0.6, label=name, color=color[name])
    left.axvline(FAITHFUL_RECOVERED, color="k", linestyle="--", linewidth=0.8)
    left.axhline(1 - FAITHFUL_ROWS, color="k", linestyle="--", linewidth=0.8)
    left.set_yscale("symlog", linthresh=1e-3)
    left.set_ylim(0, 1.3)
    left.set_xlim(-2.2, 1.05)
    left.set_xlabel("loss recovered by the construction's cells alone (baseline d/4)")
    left.set_ylabel("rows NOT exact (1 - rows exact)")
    left.set_title("each construction tested on each solved run (dashed: the rule)", fontsize=10)
    left.legend(fontsize=7)
    labels = [f"{s['model'][:5]} d={s['d']}" for s in summary]
    mechs = sorted({r["mechanism"] for r in rows})
    bottom = [0] * len(summary)
    for mech in mechs:
        heights = [sum(1 for r in rows if r["kind"] == s["model"] and r["d"] == s["d"]
                       and r["steps_to_target"] is not None and r["mechanism"] == mech)
                   for s in summary]
        right.bar(labels, heights, bottom=bottom, label=mech, color=color.get(mech, "k"))
        bottom = [b + h for b, h in zip(bottom, heights)]
    right.set_ylabel("solved runs")
    right.set_title("mechanism by the rule, per configuration", fontsize=10)
    right.tick_params(axis="x", labelrotation=45, labelsize=8)
    right.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    fig.savefig(path.with_suffix(".svg"))
    plt.close(fig)


def write_census(rows: list[dict], planned: dict[tuple[str, int], int], folder: Path) -> list[Path]:
    """``census.{json,md,png,svg}`` in ``folder``."""
    from invperm_interp.analysis.mechanism import FAITHFUL_RECOVERED, FAITHFUL_ROWS

    folder.mkdir(parents=True, exist_ok=True)
    summary = summarize(rows, planned)
    paths = [folder / f"census.{ext}" for ext in ("json", "md", "png", "svg")]
    paths[0].write_text(json.dumps({"summary": summary, "runs": rows}, indent=1) + "\n")
    cols = list(summary[0]) if summary else []
    per_run = ["run", "steps_to_target", "final_mse", "mechanism", "circuit_rows_exact",
               "loss_recovered", "minimal_named", "minimal_size", "minimal_faithful"]
    lines = [
        "# Census: what training learns, counted over seeds", "",
        "Adam lr 1e-2, N(0, 0.01²) init, batch 128, stopped at the first evaluation (every 100 "
        "steps, 1,024 held-out samples) with MSE < 1e-3 or at the step limit; analysed on 512 fresh "
        "samples. **mechanism**: the library's rule (`analysis.mechanism`): the working registry "
        "construction whose cells alone, at the model's own fitted β in the gauge-fixed weights "
        f"with its read-out block of W_U, get at least {FAITHFUL_ROWS:.0%} of rows exact and recover "
        f"at least {FAITHFUL_RECOVERED:.0%} of the loss (baseline: 0.5 everywhere, MSE d/4), with "
        "its templates' signs; fewest atoms first; 'none' otherwise. **minimal circuit**: the "
        "fewest cells found whose circuit-only model is faithful by the same rule (greedy by "
        "functional effect, then pruning; each faithful construction pruned too, the smallest "
        "kept). Produced by `make census` (the grid analyses/grids/census.toml run by `invperm "
        "sweep`, then analyses/census_report.py); runs not yet trained are not counted: *runs* / "
        "*planned* says how far the census got.", "",
        "| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    lines += ["| " + " | ".join(fmt(s[c]) if s[c] is not None else "-" for c in cols) + " |"
              for s in summary]
    lines += ["", "## Every run", "", "| " + " | ".join(per_run) + " |", "|" + " --- |" * len(per_run)]
    lines += ["| " + " | ".join("-" if r.get(c) is None else fmt(r[c]) for c in per_run) + " |"
              for r in rows]
    paths[1].write_text("\n".join(lines) + "\n")
    plot(rows, summary, paths[2])
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", help="the census sweep folder (holds sweep.jsonl)")
    parser.add_argument("--update-assets", action="store_true",
                        help="write into the checkout's assets/ instead of next to the runs")
    args = parser.parse_args(argv)
    try:
        rows, planned = census_rows(Path(args.runs))
    except ValueError as err:
        print(f"census_report: error: {err}", file=sys.stderr)
        return 2
    paths = write_census(rows, planned, ASSETS if args.update_assets else Path(args.runs))
    print("wrote " + ", ".join(map(str, paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
