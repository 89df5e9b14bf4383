"""The census's second half: each finished run's mechanism by the library's rule, then the counts.

``analyze_run`` stores ``census_analysis.json`` in the run directory (skipped when present and of
the current ``ANALYSIS_VERSION``); ``write_assets`` writes assets/census.{json,md,png}.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from common import asset  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from invperm_interp.analysis.hypothesis import cell_text  # noqa: E402

ANALYSIS_VERSION = 5  # bump when the analysis changes, so cached analyses are redone
ANALYSIS_SAMPLES = 512
KINDS = {"bidirectional": "bidirectional [P; Y_P], reads P", "scratch": "causal [P; Y_P; S], reads S"}


def analyze_run(run_dir: Path) -> dict | None:
    """Mechanism, faithfulness and minimal circuit of one finished run (cached in the run folder)."""
    from invperm_interp import sample_batch
    from invperm_interp.analysis import is_faithful, mechanism
    from invperm_interp.analysis.mechanism import is_minimal
    from invperm_interp.training.run import Run

    done, trained = run_dir / "census_analysis.json", run_dir / "census_train.json"
    if not trained.is_file():
        return None
    if done.is_file():
        cached = json.loads(done.read_text())
        if cached.get("version") == ANALYSIS_VERSION:
            return cached
    torch.set_num_threads(1)
    out = json.loads(trained.read_text())
    model = Run.load(run_dir).model
    generator = torch.Generator().manual_seed(12345)
    batch = sample_batch(model.cfg.layout, ANALYSIS_SAMPLES, generator=generator,
                         dtype=model.cfg.torch_dtype)
    mech = mechanism(model, batch)
    f, m = mech.faithfulness, mech.minimal
    out.update({
        "version": ANALYSIS_VERSION, "mechanism": mech.name,
        "circuit_mse": f.circuit.mse if f else None,
        "circuit_rows_exact": f.circuit.rows_exact if f else None,
        "loss_recovered": f.circuit.loss_recovered if f else None,
        "without_mse": f.without.mse if f else None,
        "minimal_named": is_minimal(f) if f else None,
        "minimal_size": m.size, "minimal_faithful": m.faithful,
        "minimal_rows_exact": m.score.rows_exact, "minimal_loss_recovered": m.score.loss_recovered,
        "minimal_weight_share": m.weight_share, "minimal_read": list(m.read),
        "minimal_cells": [cell_text(c) for c in m.cells],
        "tested": [{"name": t.hypothesis, "rows_exact": t.circuit.rows_exact,
                    "loss_recovered": t.circuit.loss_recovered, "signs_agree": t.signs_agree,
                    "faithful": is_faithful(t.circuit)} for t in mech.tested],
    })
    done.write_text(json.dumps(out, indent=1))
    return out


def _analyze(run_dir: str) -> dict | None:
    return analyze_run(Path(run_dir))


def analyze_all(todo: list[tuple[str, int, int]], root: Path, workers: int) -> list[dict]:
    from census import run_name

    dirs = [str(root / run_name(*job)) for job in todo]
    dirs = [d for d in dirs if (Path(d) / "census_train.json").is_file()]
    with ProcessPoolExecutor(workers) as pool:
        rows = list(tqdm(pool.map(_analyze, dirs), total=len(dirs), desc="census: analysing",
                         unit="run"))
    return [r for r in rows if r is not None]


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(rows: list[dict], seeds: dict[int, int]) -> list[dict]:
    """One row per (kind, d): runs done, solved, median steps, mechanism counts, 'none' sizes."""
    out = []
    for kind in KINDS:
        for d in sorted(seeds):
            group = [r for r in rows if r["kind"] == kind and r["d"] == d]
            if not group:
                continue
            solved = [r for r in group if r["steps_to_target"] is not None]
            counts = Counter(r["mechanism"] for r in solved)
            none = [r for r in solved if r["mechanism"] == "none"]
            named = [r for r in solved if r["mechanism"] != "none"]
            out.append({
                "model": kind, "d": d, "runs": len(group), "planned": seeds[d],
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
    plt.close(fig)


def write_assets(rows: list[dict], seeds: dict[int, int]) -> None:
    from common import fmt

    from invperm_interp.analysis.mechanism import FAITHFUL_RECOVERED, FAITHFUL_ROWS

    summary = summarize(rows, seeds)
    asset("census.json").write_text(json.dumps({"summary": summary, "runs": rows}, indent=1) + "\n")
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
        "kept). Produced by `make census` (analyses/census.py); runs not yet "
        "trained are not counted: *runs* / *planned* says how far the census got.", "",
        "| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    lines += ["| " + " | ".join(fmt(s[c]) if s[c] is not None else "-" for c in cols) + " |"
              for s in summary]
    lines += ["", "## Every run", "", "| " + " | ".join(per_run) + " |", "|" + " --- |" * len(per_run)]
    lines += ["| " + " | ".join("-" if r.get(c) is None else fmt(r[c]) for c in per_run) + " |"
              for r in rows]
    asset("census.md").write_text("\n".join(lines) + "\n")
    plot(rows, summary, asset("census.png"))
    print("wrote assets/census.json, assets/census.md and assets/census.png")
