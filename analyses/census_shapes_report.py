"""The census over shapes: reads a sweep of ``analyses/grids/census_shapes.toml`` (its analysis
stage named each run's mechanism, at a placement, by the library's rule) and writes
``census_shapes.{json,md,png}`` next to it, or into ``assets/`` with ``--update-assets``. It trains
and analyses nothing.

Per model and shape (layers × heads per layer): runs solved; what the rule names (a construction
and its placement), borderline and none, with Wilson 95% intervals; the names under mean and
resample ablation; and what the heads outside the named placement do. That is measured by knocking
out each head of the run's model in turn (its output zeroed in the stream, so later layers read
zeros; ``KNOCKOUT_SAMPLES`` fresh samples): a head is **needed** when the model without it gets
fewer than 99% of its rows exact (the rule's threshold). A named run's other heads leave the
circuit **alone** (every head of the placement is needed and no other head is), **copy** it
(a head of the placement is not needed, or another one-head placement of the construction passes
too: redundant heads) or **split** it (the placement is a sum of a layer's heads, or a head outside
it is needed too). For every solved run, named or not: how many heads are needed and whether a
layer has no needed head (an idle layer).

    python analyses/census_shapes_report.py runs/census_shapes [--update-assets]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import matplotlib
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from census_report import share_text  # noqa: E402
from common import report_folder  # noqa: E402

from invperm_interp.analysis.mechanism import RULE  # noqa: E402
from invperm_interp.analysis.sweep_record import STYLES, SweepRecord  # noqa: E402
from invperm_interp.maths.placement import Placement  # noqa: E402
from invperm_interp.sweep.collect import read_sweep  # noqa: E402
from invperm_interp.task import sample_batch  # noqa: E402
from invperm_interp.training.run import Run  # noqa: E402

KINDS = {"bidirectional": "bidirectional [P; Y_P], reads P", "scratch": "causal [P; Y_P; S], reads S"}
ROLES = ("alone", "copied", "split")
KNOCKOUT_SAMPLES, KNOCKOUT_SEED = 1024, 12345


def heads_of(model: dict) -> tuple[int, ...]:
    heads = model["n_heads"]
    return (heads,) * model["n_layers"] if isinstance(heads, int) else tuple(heads)


def shape_of(model: dict) -> str:
    """``"3x2"``: layers × heads per layer (``"2x(2,1)"`` when the layers differ)."""
    heads = heads_of(model)
    width = str(heads[0]) if len(set(heads)) == 1 else f"({','.join(map(str, heads))})"
    return f"{model['n_layers']}x{width}"


def head_names(heads: tuple[int, ...]) -> list[str]:
    """``["L1h0", "L1h1", "L2h0", …]``: every head, layers counted from 1."""
    return [f"L{layer + 1}h{k}" for layer, n in enumerate(heads) for k in range(n)]


def knockouts(run_dir: Path, samples: int = KNOCKOUT_SAMPLES, seed: int = KNOCKOUT_SEED
              ) -> dict[str, float]:
    """Per head (:func:`head_names`), the share of rows exact of the run's model with that head's
    output ``z`` zeroed (``blocks.{l}.attn.hook_z``), on ``samples`` fresh samples."""
    model = Run.load(run_dir).model
    batch = sample_batch(model.cfg.layout, samples, torch.Generator().manual_seed(seed),
                         dtype=model.cfg.torch_dtype)
    out = {}
    for layer, n in enumerate(model.cfg.heads):
        for head in range(n):
            def zero(z, hook, head=head):  # (B, T, H, D_l)
                z = z.clone()
                z[:, :, head] = 0.0
                return z

            with torch.no_grad():
                Y = model.run_with_hooks(batch.X, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", zero)])
            out[f"L{layer + 1}h{head}"] = float((Y.round() == batch.Y).all(-1).double().mean())
    return out


def needed_heads(rows_exact: dict[str, float]) -> list[str]:
    """The heads whose knockout leaves fewer than the rule's share of rows exact."""
    return [h for h, r in rows_exact.items() if r < RULE.rows]


def placement_heads(placed: Placement) -> set[str]:
    """The heads a placement's cells sit on (every head of a summed layer)."""
    return {f"L{placed.layers[i] + 1}h{k}" for i in range(len(placed.layers)) for k in placed.head_list(i)}


def constructions(record: SweepRecord, style: str) -> str:
    """The constructions the answer under ``style`` names, placements dropped (``" = "`` between
    those tied), or its verdict when it names none."""
    answer = record.answer if style == "zero" else record.under[style]
    return " = ".join(record.constructions(style)) or answer.verdict


def role(record: SweepRecord, heads: tuple[int, ...], needed: list[str] | None) -> str | None:
    """What the heads outside the named placement do (module docstring); ``None`` if none named.
    ``needed``: the heads whose knockout breaks the model (``None``: not measured, then read from
    the tested placements only)."""
    mech = record.mechanism
    if mech.name is None:
        return None
    # a construction on its own shape is named bare: it sits where it was registered
    placed = mech.placement or mech.faithfulness.placement or Placement.own(mech.name)
    if placed.summed:
        return "split"
    mine = placement_heads(placed)
    if needed is not None and not mine <= set(needed):
        return "copied"
    others = [t.placement for t in mech.tested if t.hypothesis in mech.also_faithful and t.placement]
    if any(p.construction == placed.construction and not p.summed for p in others):
        return "copied"
    return "split" if needed is not None and set(needed) - mine else "alone"


def idle_layers(heads: tuple[int, ...], needed: list[str]) -> list[int]:
    """Layers (from 1) none of whose heads is needed."""
    return [layer + 1 for layer in range(len(heads))
            if not any(h.startswith(f"L{layer + 1}h") for h in needed)]


def shape_rows(folder: Path, measure: bool = True) -> list[dict]:
    """One row per run of the sweep (unsolved and unanalysed ones with ``None``); ``measure``: knock
    out each head of every solved run's model (:func:`knockouts`; else roles from the tested
    placements only)."""
    rows = []
    for _, record in read_sweep(folder):
        model = record["model"]
        kind = "bidirectional" if model["attention_dir"] == "bidirectional" else "scratch"
        analysis = SweepRecord.from_dict(record["analysis"]) if record.get("analysis") else None
        named = str(analysis.answer) if analysis else None
        solved = record["steps_to_solve"] is not None
        run_dir = folder / record["name"]
        rows_exact = (knockouts(run_dir) if solved and analysis and measure
                      and (run_dir / "final.safetensors").is_file() else None)
        needed = None if rows_exact is None else needed_heads(rows_exact)
        heads = heads_of(model)
        rows.append({"run": record["name"], "kind": kind, "d": model["layout"]["d"],
                     "shape": shape_of(model), "heads": sum(heads), "seed": record["train"]["seed"],
                     "solved": solved, "steps_to_target": record["steps_to_solve"],
                     "mechanism": named,
                     "construction": None if named is None else constructions(analysis, "zero"),
                     "knockout_rows_exact": rows_exact, "needed_heads": needed,
                     "idle_layers": None if needed is None else idle_layers(heads, needed),
                     "role": role(analysis, heads, needed) if analysis else None,
                     "untested": analysis.mechanism.untested if analysis else None,
                     "also_faithful": list(analysis.mechanism.also_faithful) if analysis else [],
                     **{style: str(analysis.under[style]) if analysis and style in analysis.under
                        else None for style in STYLES},
                     "constructions_under": {style: constructions(analysis, style) for style in STYLES
                                             if analysis and style in analysis.under}})
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
        styles = {style: Counter(r["constructions_under"][style] for r in solved if r[style])
                  for style in STYLES}
        measured = [r for r in solved if r["needed_heads"] is not None]
        out.append({
            "model": kind, "shape": shape, "runs": len(runs),
            "analysed": sum(r["mechanism"] is not None for r in runs),
            "solved": sum(r["solved"] for r in runs),
            **{v: share_text(verdicts[v], n) for v in ("named", "borderline", "none")},
            "names": dict(Counter(r["mechanism"] for r in solved).most_common()),
            "roles": {x: share_text(sum(r["role"] == x for r in solved), verdicts["named"])
                      for x in ROLES},
            "zero_ablation": dict(Counter(r["construction"] for r in solved).most_common()),
            **{style: dict(c.most_common()) for style, c in styles.items()},
            "untested": sorted({r["untested"] for r in runs if r["untested"]}),
            "knocked_out": len(measured),
            "heads_needed": dict(sorted(Counter(len(r["needed_heads"]) for r in measured).items())),
            "needed_by_head": dict(sorted(Counter(h for r in measured for h in r["needed_heads"]).items())),
            "idle_layer": share_text(sum(bool(r["idle_layers"]) for r in measured), len(measured)),
        })
    return out


def plot(summary: list[dict], rows: list[dict], path: Path) -> None:
    """Per (model, shape): the solved runs by what the rule names (construction; grey: none,
    dark grey: borderline; a tie hatched in its first member's colour), and the named ones by
    role."""
    # stacked, not side by side: readable at 800 px as at 1400
    fig, (left, right, heads) = plt.subplots(3, 1, figsize=(9, 11))
    labels = [f"{s['model'][:5]} {s['shape']}" for s in summary]
    solved = [r for r in rows if r["solved"] and r["mechanism"] is not None]
    names = sorted({r["construction"] for r in solved} - {"none", "borderline"})
    # one colour per construction, never a grey (the greys are borderline and none); a tie is
    # hatched in its first member's colour
    firsts = sorted({n.split(" = ")[0] for n in names})
    palette = [f"C{i}" for i in range(10) if i != 7] + ["#17becf80", "#bcbd2280"]
    color = {n: palette[i % len(palette)] for i, n in enumerate(firsts)}
    color |= {n: color[n.split(" = ")[0]] for n in names} | {"borderline": "0.45", "none": "0.8"}
    for panel, key, groups in ((left, "construction", [*names, "borderline", "none"]),
                               (right, "role", list(ROLES))):
        bottom = [0] * len(summary)
        for i, group in enumerate(groups):
            heights = [sum(1 for r in solved if (r["kind"], r["shape"]) == (s["model"], s["shape"])
                           and r[key] == group) for s in summary]
            tie = key == "construction" and " = " in group
            panel.bar(labels, heights, bottom=bottom, label=group,
                      color=color.get(group, f"C{i}") if key == "construction" else f"C{i + 3}",
                      hatch="///" if tie else None, edgecolor="white" if tie else None)
            bottom = [b + h for b, h in zip(bottom, heights)]
        panel.set_ylim(0, max(bottom, default=0) * 1.08 + 0.5)  # the tallest bar clear of the frame
        panel.set_ylabel("solved runs")
        panel.yaxis.get_major_locator().set_params(integer=True)
        panel.tick_params(axis="x", labelsize=8)
        panel.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    left.set_title("what the rule names (any placement), per model and shape", fontsize=10)
    right.set_title("named runs: the other heads leave it alone, copy it, or split it", fontsize=10)
    for i, s in enumerate(summary):  # every solved run's count of needed heads, named or not
        runs = [r for r in solved if (r["kind"], r["shape"]) == (s["model"], s["shape"])
                and r["needed_heads"] is not None]
        for j, r in enumerate(runs):
            named = r["mechanism"] not in ("none", "borderline")
            heads.plot(i + 0.3 * (j / max(len(runs) - 1, 1) - 0.5), len(r["needed_heads"]),
                       "o" if named else "x", color="C0" if named else "0.4", ms=5)
    heads.set_xticks(range(len(summary)), labels, fontsize=8)
    heads.set_xlim(-0.6, len(summary) - 0.4)
    most = max((r["heads"] for r in rows), default=1)
    heads.set_ylim(-0.3, most + 0.3)
    heads.yaxis.get_major_locator().set_params(integer=True)
    heads.set_ylabel("heads needed (knocked out one at a time)")
    heads.set_title("solved runs: heads needed (o named, x none)", fontsize=10)
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
             f"Each head of a solved run is knocked out in turn (its output zeroed, "
             f"{KNOCKOUT_SAMPLES} samples); it is needed when fewer than {RULE.rows:.0%} of the rows "
             "stay exact. Roles of the named runs: alone (the placement's heads are needed, no other "
             "is), copied (a head of the placement is not needed, or another one-head placement of "
             "the construction passes too), split (the placement is a sum of heads, or a head outside "
             "it is needed too). Idle layer: a solved run with a layer none of whose heads is needed. "
             "docs/shapes.md says how placements are tested.", "",
             "| model | shape | runs | analysed | solved | named | borderline | none | alone | copied "
             "| split | idle layer |",
             "|" + " --- |" * 12]
    for s in summary:
        shares = [s["named"], s["borderline"], s["none"], *(s["roles"][x] for x in ROLES),
                  s["idle_layer"]]
        lines.append(f"| {s['model']} | {s['shape']} | {s['runs']} | {s['analysed']} | {s['solved']} | "
                     + " | ".join("-" if x.startswith("0 of 0 ") else x for x in shares) + " |")
    missing = [r["run"] for r in rows if r["mechanism"] is None]
    if missing:
        lines += ["", f"{len(missing)} of {len(rows)} runs had no analysis record (not trained or "
                  "not analysed yet) when this was written."]
    lines += ["", "## Names by placement", ""]
    for s in summary:
        names = "; ".join(f"{name} ×{k}" for name, k in s["names"].items()) or "-"
        lines.append(f"- {s['model']} {s['shape']}: {names}")
        for style in STYLES:
            lines.append(f"  - under {style} ablation: "
                         + ("; ".join(f"{n} ×{k}" for n, k in s[style].items()) or "-"))
        lines += [f"  - {reason}" for reason in s["untested"]]
        if s["knocked_out"]:
            count = ", ".join(f"{k} heads in {n}" for k, n in s["heads_needed"].items())
            which = ", ".join(f"{h} ×{n}" for h, n in s["needed_by_head"].items()) or "none"
            lines.append(f"  - heads needed (knocked out one at a time, {s['knocked_out']} runs): "
                         f"{count}; which: {which}")
    paths[1].write_text("\n".join(lines) + "\n")
    plot(summary, rows, paths[2])
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the sweep's output folder")
    parser.add_argument("--update-assets", action="store_true", help="write into assets/")
    parser.add_argument("--no-knockouts", action="store_true",
                        help="roles from the tested placements only (no model is loaded)")
    args = parser.parse_args(argv)
    try:
        out = report_folder(args.folder, False, args.update_assets)
    except ValueError as err:
        print(f"census_shapes_report: error: {err}", file=sys.stderr)
        return 2
    if not (args.folder / "sweep.jsonl").is_file():
        print(f"{args.folder} has no sweep.jsonl: run `invperm sweep "
              f"analyses/grids/census_shapes.toml --out {args.folder}` first", file=sys.stderr)
        return 2
    rows = shape_rows(args.folder, measure=not args.no_knockouts)
    if not rows:
        print(f"no runs in {args.folder}", file=sys.stderr)
        return 1
    for path in write(rows, out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
