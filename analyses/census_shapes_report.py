"""The census over shapes: reads a sweep of ``analyses/grids/census_shapes.toml`` (its analysis
stage named each run's mechanism, at a placement, by the library's rule) and writes
``census_shapes.{json,md,png}`` next to it, or into ``assets/`` with ``--update-assets``. It trains
and analyses nothing.

Per model and shape (layers × heads per layer): runs solved; what the rule names (a construction
and its placement), borderline and none, with Wilson 95% intervals; the names under mean and
resample ablation; and what the heads outside the named placement do, read from the tested
placements: **alone** (no other placement of the construction passes), **copied** (another
one-head placement of it passes too: redundant heads) or **split** (only the sum of a layer's
heads passes).

    python analyses/census_shapes_report.py runs/census_shapes [--update-assets]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from census_report import share_text  # noqa: E402
from common import ASSETS  # noqa: E402

from invperm_interp.analysis.sweep_record import STYLES, SweepRecord  # noqa: E402
from invperm_interp.maths.placement import parse  # noqa: E402
from invperm_interp.sweep.collect import read_sweep  # noqa: E402

KINDS = {"bidirectional": "bidirectional [P; Y_P], reads P", "scratch": "causal [P; Y_P; S], reads S"}
ROLES = ("alone", "copied", "split")


def heads_of(model: dict) -> tuple[int, ...]:
    heads = model["n_heads"]
    return (heads,) * model["n_layers"] if isinstance(heads, int) else tuple(heads)


def shape_of(model: dict) -> str:
    """``"3x2"``: layers × heads per layer (``"2x(2,1)"`` when the layers differ)."""
    heads = heads_of(model)
    width = str(heads[0]) if len(set(heads)) == 1 else f"({','.join(map(str, heads))})"
    return f"{model['n_layers']}x{width}"


def construction_of(name: str) -> str:
    """``"two_block @ L1h0→L3h1"`` → ``"two_block"`` (a bare name, 'none', 'borderline' as it is)."""
    return name.split(" @ ", 1)[0]


def role(record: SweepRecord, heads: tuple[int, ...]) -> str | None:
    """What the heads outside the named placement do (module docstring); ``None`` if none named."""
    mech = record.mechanism
    if mech.name is None:
        return None
    placed = mech.placement or parse(mech.name, heads)
    if placed.summed:
        return "split"
    others = [parse(n, heads) for n in mech.also_faithful]
    return "copied" if any(p.construction == placed.construction and not p.summed
                           for p in others) else "alone"


def shape_rows(folder: Path) -> list[dict]:
    """One row per run of the sweep (unsolved and unanalysed ones with ``None``)."""
    rows = []
    for _, record in read_sweep(folder):
        model = record["model"]
        kind = "bidirectional" if model["attention_dir"] == "bidirectional" else "scratch"
        analysis = SweepRecord.from_dict(record["analysis"]) if record.get("analysis") else None
        named = str(analysis.answer) if analysis else None
        rows.append({"run": record["name"], "kind": kind, "d": model["layout"]["d"],
                     "shape": shape_of(model), "seed": record["train"]["seed"],
                     "solved": record["steps_to_solve"] is not None,
                     "steps_to_target": record["steps_to_solve"],
                     "mechanism": named, "construction": None if named is None else construction_of(named),
                     "role": role(analysis, heads_of(model)) if analysis else None,
                     "untested": analysis.mechanism.untested if analysis else None,
                     "also_faithful": list(analysis.mechanism.also_faithful) if analysis else [],
                     **{style: str(analysis.under[style]) if analysis and style in analysis.under
                        else None for style in STYLES}})
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    """Per (model, shape): solved, named / borderline / none among the solved, roles, names."""
    out = []
    for kind, shape in sorted({(r["kind"], r["shape"]) for r in rows}):
        runs = [r for r in rows if r["kind"] == kind and r["shape"] == shape]
        solved = [r for r in runs if r["solved"] and r["mechanism"] is not None]
        n = len(solved)
        verdicts = Counter("none" if r["mechanism"] == "none" else
                           "borderline" if r["mechanism"] == "borderline" else "named" for r in solved)
        styles = {style: Counter(construction_of(r[style]) for r in solved if r[style])
                  for style in STYLES}
        out.append({
            "model": kind, "shape": shape, "runs": len(runs),
            "solved": sum(r["solved"] for r in runs),
            **{v: share_text(verdicts[v], n) for v in ("named", "borderline", "none")},
            "names": dict(Counter(r["mechanism"] for r in solved).most_common()),
            "roles": {x: share_text(sum(r["role"] == x for r in solved), verdicts["named"])
                      for x in ROLES},
            "zero_ablation": dict(Counter(r["construction"] for r in solved).most_common()),
            **{style: dict(c.most_common()) for style, c in styles.items()},
            "untested": sorted({r["untested"] for r in runs if r["untested"]}),
        })
    return out


def plot(summary: list[dict], rows: list[dict], path: Path) -> None:
    """Per (model, shape): the solved runs by what the rule names (construction; grey: none,
    dark grey: borderline), and the named ones by role."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), width_ratios=(1.4, 1))
    labels = [f"{s['model'][:5]} {s['shape']}" for s in summary]
    solved = [r for r in rows if r["solved"] and r["mechanism"] is not None]
    names = sorted({r["construction"] for r in solved} - {"none", "borderline"})
    color = {n: f"C{i % 10}" for i, n in enumerate(names)} | {"borderline": "0.45", "none": "0.8"}
    for panel, key, groups in ((left, "construction", [*names, "borderline", "none"]),
                               (right, "role", list(ROLES))):
        bottom = [0] * len(summary)
        for i, group in enumerate(groups):
            heights = [sum(1 for r in solved if (r["kind"], r["shape"]) == (s["model"], s["shape"])
                           and r[key] == group) for s in summary]
            panel.bar(labels, heights, bottom=bottom, label=group,
                      color=color.get(group, f"C{i}") if key == "construction" else f"C{i + 3}")
            bottom = [b + h for b, h in zip(bottom, heights)]
        panel.set_ylabel("solved runs")
        panel.tick_params(axis="x", labelrotation=45, labelsize=8)
        panel.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    left.set_title("what the rule names (any placement), per model and shape", fontsize=10)
    right.set_title("named runs: the other heads leave it alone, copy it, or split it", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(rows: list[dict], folder: Path) -> list[Path]:
    """``census_shapes.{json,md,png}`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    summary = summarize(rows)
    paths = [folder / f"census_shapes.{ext}" for ext in ("json", "md", "png")]
    paths[0].write_text(json.dumps({"summary": summary, "runs": rows}, indent=1) + "\n")
    lines = ["# Census over shapes", "",
             "What the mechanism rule names on models of 2 or 3 layers of 1 or 2 heads (a "
             "construction at its placement; counts of the solved runs with Wilson 95% intervals). "
             "Roles of the named runs: alone (no other placement of the construction passes), "
             "copied (another one-head placement of it passes too), split (only a sum of a layer's "
             "heads passes). docs/shapes.md says how placements are tested.", "",
             "| model | shape | runs | solved | named | borderline | none | alone | copied | split |",
             "|" + " --- |" * 10]
    for s in summary:
        lines.append(f"| {s['model']} | {s['shape']} | {s['runs']} | {s['solved']} | {s['named']} | "
                     f"{s['borderline']} | {s['none']} | "
                     + " | ".join(s["roles"][x] for x in ROLES) + " |")
    lines += ["", "## Names by placement", ""]
    for s in summary:
        names = "; ".join(f"{name} ×{k}" for name, k in s["names"].items()) or "-"
        lines.append(f"- {s['model']} {s['shape']}: {names}")
        for style in STYLES:
            lines.append(f"  - under {style} ablation: "
                         + ("; ".join(f"{n} ×{k}" for n, k in s[style].items()) or "-"))
        lines += [f"  - {reason}" for reason in s["untested"]]
    paths[1].write_text("\n".join(lines) + "\n")
    plot(summary, rows, paths[2])
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the sweep's output folder")
    parser.add_argument("--update-assets", action="store_true", help="write into assets/")
    args = parser.parse_args(argv)
    if not (args.folder / "sweep.jsonl").is_file():
        print(f"{args.folder} has no sweep.jsonl: run `invperm sweep "
              f"analyses/grids/census_shapes.toml --out {args.folder}` first", file=sys.stderr)
        return 2
    rows = shape_rows(args.folder)
    if not rows:
        print(f"no runs in {args.folder}", file=sys.stderr)
        return 1
    for path in write(rows, ASSETS if args.update_assets else args.folder):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
