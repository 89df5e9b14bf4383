"""The census on standard transformers beside the disentangled one: reads a sweep of
``analyses/grids/census_standard.toml`` (its analysis stage named each run's mechanism through the
exact map to the disentangled model, docs/standard.md) and the disentangled census
(``assets/census.json``), and writes ``census_standard.{json,md,png}`` next to the sweep, or into
``assets/`` with ``--update-assets``. It trains and analyses nothing. ``--from-json`` reads the
standard rows from a ``census_standard.json`` it wrote and writes beside it (a JSON in ``assets/``
only with ``--update-assets``).

One table, per setting (bidirectional [P; Y_P] reading P, causal scratch [P; Y_P; S] reading S) and
d: the standard models with 1 and 2 heads per layer and the disentangled census's models of the
same d, side by side: runs, solved (MSE < 1e-3) with Wilson 95% intervals, median steps to solve,
what the rule names among the solved (named / borderline / none with Wilson intervals, the
constructions), and how many keep their name under mean and under resample ablation. Beside it,
per standard run, each head's ``W_OV = W_V W_O``: its effective rank (the fewest singular values
holding ``EFFECTIVE`` of its squared norm) against ``d_head``, which bounds its rank, and the width
``D_0 = d + T`` of the stream ``[x, pos]`` that a first-layer head copies.

    python analyses/census_standard_report.py runs/census_standard [--update-assets]
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
from census_report import share_text  # noqa: E402
from common import ASSETS, report_folder  # noqa: E402

from invperm_interp.analysis.hypothesis import cell_text  # noqa: E402
from invperm_interp.analysis.sweep_record import STYLES, SweepRecord  # noqa: E402
from invperm_interp.model.note_map import numerical_ranks, ov_spectra  # noqa: E402
from invperm_interp.sweep.collect import read_sweep  # noqa: E402
from invperm_interp.training.run import Run  # noqa: E402

KINDS = {"bidirectional": "bidirectional [P; Y_P], reads P", "scratch": "causal [P; Y_P; S], reads S"}
#: ``W_OV``'s effective rank: the fewest singular values holding this share of its squared norm.
EFFECTIVE = 0.9
DISENTANGLED = "disentangled (census)"


def construction_of(name: str | None) -> str | None:
    """``"two_block @ L1h0→L2h1"`` → ``"two_block"``; a tie of placements of one construction is that
    construction; ``"none"``, ``"borderline"`` and ties of several constructions as they are. The
    census JSON this report rebuilds from keeps the rule's answers as their labels (tables show
    them), so this reads a label's own printed form; the package itself keeps placements as values."""
    if name is None:
        return None
    return " = ".join(dict.fromkeys(part.split(" @ ", 1)[0] for part in name.split(" = ")))


def verdict_of(name: str) -> str:
    return name if name in ("none", "borderline") else "named"


def ov_ranks(run_dir: Path | None) -> dict:
    """Per layer and head, the effective rank of the final model's ``W_OV`` (``ov_rank``) and its
    numerical rank (``ov_numerical_rank``: ``note_map.numerical_ranks``, singular values above
    ``1e-6`` of the largest); ``None`` for both without a trained run (``run_dir`` None)."""
    if run_dir is None:
        return {"ov_rank": None, "ov_numerical_rank": None}

    def rank(values: list[float]) -> int:
        total, held = sum(v * v for v in values), 0.0
        for k, v in enumerate(values, 1):
            held += v * v
            if held >= EFFECTIVE * total:
                return k
        return len(values)

    spectra = ov_spectra(Run.load(run_dir).model)
    return {"ov_rank": [[rank(head) for head in layer] for layer in spectra],
            "ov_numerical_rank": numerical_ranks(spectra)}


def standard_rows(folder: Path) -> list[dict]:
    """One row per run of the standard sweep (an unfinished or unanalysed run with ``None``s)."""
    rows = []
    for _, record in read_sweep(folder):
        model = record["model"]
        kind = "bidirectional" if model["attention_dir"] == "bidirectional" else "scratch"
        analysis = (SweepRecord.from_dict(record["analysis"]) if record.get("analysis")
                    and record["status"] != "unfinished" else None)
        named = str(analysis.answer) if analysis else None
        run_dir = folder / record["name"]
        finished = record["status"] != "unfinished" and (run_dir / "final.safetensors").is_file()
        d, T = model["layout"]["d"], sum(seg[2] for seg in model["layout"]["segments"])
        heads = model["n_heads"] if isinstance(model["n_heads"], int) else model["n_heads"][0]
        rows.append({
            "run": record["name"], "kind": kind, "d": d, "heads": heads,
            "architecture": f"standard, {heads} head{'s' if heads > 1 else ''}",
            "d_model": model["d_model"], "d_head": model.get("d_head") or model["d_model"] // heads,
            "D0": d + T, "seed": record["train"]["seed"], "finished": finished,
            "solved": record["steps_to_solve"] is not None, "steps_to_target": record["steps_to_solve"],
            "final_mse": record["final"] and record["final"].mse, "mechanism": named,
            **minimal_fields(analysis),
            **{f"name_{style}": str(analysis.under[style]) if analysis and style in analysis.under
               else None for style in STYLES},
            **ov_ranks(run_dir if finished else None)})
    return rows


def minimal_fields(analysis: SweepRecord | None) -> dict:
    """The minimal-circuit search's result: whether it found a faithful circuit, its size, and
    what its cells alone score (``None``s without an analysis)."""
    m = analysis.mechanism.minimal if analysis else None
    within = None
    if m is not None and m.faithful:  # the tested constructions whose cells hold all of its cells
        cells = {c[:4] for c in m.cells}
        within = [t.hypothesis for t in analysis.mechanism.tested if cells <= {c[:4] for c in t.cells}]
    return {"minimal_faithful": m and m.faithful, "minimal_size": m and m.size,
            "minimal_within": within,
            "minimal_candidates": m and m.candidates,
            "minimal_rows_exact": m and m.score.rows_exact,
            "minimal_weight_share": m and m.weight_share,
            "minimal_cells": m and [cell_text(c) for c in m.cells]}


def rows_from_json(path: Path) -> list[dict]:
    """The standard runs' rows of a ``census_standard.json`` this script wrote."""
    return [r for r in json.loads(path.read_text())["runs"] if r["architecture"] != DISENTANGLED]


def disentangled_rows(census: dict, ds: set[int]) -> list[dict]:
    """The disentangled census's runs at the sweep's ``d`` values, in this report's columns."""
    return [{"run": r["run"], "kind": r["kind"], "d": r["d"], "architecture": DISENTANGLED,
             "finished": True, "solved": r["steps_to_target"] is not None,
             "steps_to_target": r["steps_to_target"], "mechanism": r["mechanism"],
             "name_mean": r.get("name_mean_ablation"), "name_resample": r.get("name_resample_ablation"),
             **{k: r.get(k) for k in ("minimal_faithful", "minimal_size", "minimal_candidates",
                                      "minimal_rows_exact", "minimal_weight_share", "minimal_cells")}}
            for r in census["runs"] if r["d"] in ds]


def unnamed(rows: list[dict]) -> list[dict]:
    """Per setting and architecture, the solved runs the rule names none, by what their
    minimal-circuit search found: a faithful circuit inside a tested construction's cells (the
    construction's other cells hurt it), a faithful circuit outside every construction, or no
    faithful circuit among its candidates."""
    out = []
    for kind, arch in sorted({(r["kind"], r["architecture"]) for r in rows}):
        nones = [r for r in rows if (r["kind"], r["architecture"]) == (kind, arch) and r["finished"]
                 and r["solved"] and r["mechanism"] == "none" and r.get("minimal_faithful") is not None]
        if not nones:
            continue
        faithful = [r for r in nones if r["minimal_faithful"]]
        inside = [r for r in faithful if r.get("minimal_within")]
        known = all("minimal_within" in r for r in nones)  # the census's records do not say
        out.append({"model": kind, "architecture": arch, "none": len(nones),
                    "faithful minimal circuit": len(faithful),
                    "inside a construction's cells": len(inside) if known else None,
                    "outside the registry": len(faithful) - len(inside) if known else None,
                    "no faithful circuit": len(nones) - len(faithful),
                    "sizes outside": sorted(r["minimal_size"] for r in faithful if r not in inside)
                    if known else [],
                    "constructions": dict(Counter(construction_of(r["minimal_within"][0])
                                                  for r in inside).most_common())})
    return out


def summarize(rows: list[dict]) -> list[dict]:
    """Per (model, d, architecture): solved, the rule's verdicts and names, and agreement of styles."""
    order = lambda a: (a == DISENTANGLED, a)  # noqa: E731 - standard first, by heads
    out = []
    for kind, d, arch in sorted({(r["kind"], r["d"], r["architecture"]) for r in rows},
                                key=lambda k: (k[0], k[1], order(k[2]))):
        runs = [r for r in rows if (r["kind"], r["d"], r["architecture"]) == (kind, d, arch)]
        finished = [r for r in runs if r["finished"]]
        solved = [r for r in finished if r["solved"] and r["mechanism"] is not None]
        n = len(solved)
        verdicts = Counter(verdict_of(r["mechanism"]) for r in solved)
        steps = [r["steps_to_target"] for r in finished if r["solved"]]
        same = {style: sum(construction_of(r[f"name_{style}"]) == construction_of(r["mechanism"])
                           for r in solved if r[f"name_{style}"] is not None) for style in STYLES}
        ranks = [rank for r in finished if r.get("ov_rank") for layer in r["ov_rank"] for rank in layer]
        full = [rank == r["d_head"] for r in finished if r.get("ov_numerical_rank")
                for layer in r["ov_numerical_rank"] for rank in layer]
        searched = [r for r in solved if r.get("minimal_faithful") is not None]
        faithful = [r["minimal_size"] for r in searched if r["minimal_faithful"]]
        out.append({
            "model": kind, "d": d, "architecture": arch, "runs": len(runs), "trained": len(finished),
            "solved": share_text(len(steps), len(finished)),
            "median steps to solve": f"{statistics.median(steps):g}" if steps else None,
            **{v: share_text(verdicts[v], n) for v in ("named", "borderline", "none")},
            "names": dict(Counter(construction_of(r["mechanism"]) for r in solved).most_common()),
            **{f"same under {style}": f"{same[style]} of {n}" for style in STYLES},
            "minimal circuit faithful": share_text(len(faithful), len(searched)),
            "its cells": (f"{min(faithful)}–{max(faithful)}" if len(set(faithful)) > 1
                          else f"{faithful[0]}") if faithful else None,
            "d_head": runs[0].get("d_head"), "D0": runs[0].get("D0"),
            "W_OV effective rank": f"{min(ranks)}–{max(ranks)}" if ranks else None,
            "W_OV full rank": f"{sum(full)} of {len(full)} heads" if full else None})
    return out


def plot(summary: list[dict], path: Path) -> None:
    """Per setting, each architecture's trained runs: unsolved, then the solved by name."""
    kinds = [k for k in KINDS if any(s["model"] == k for s in summary)]
    entries = [len({n for s in summary if s["model"] == k for n in s["names"]}) + 1 for k in kinds]
    bars = [sum(s["model"] == k for s in summary) for k in kinds]
    # room for each panel's legend and a readable bar per row
    heights = [max(1.8, 0.9 + 0.2 * n, 0.5 + 0.3 * b) for n, b in zip(entries, bars)]
    fig, axes = plt.subplots(len(kinds), 1, figsize=(7.5, sum(heights) + 0.4), squeeze=False,
                             gridspec_kw={"height_ratios": heights, "hspace": 0.45})
    names = sorted({n for s in summary for n in s["names"]} - {"none", "borderline"})
    single = [n for n in names if " = " not in n]
    palette = [c for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 7]  # grey is 'none'
    colours = dict(zip(single, palette))
    colours |= {n: colours.get(n.split(" = ")[0], "#444444") for n in names if " = " in n}  # a tie:
    hatch = {n: "xx" for n in names if " = " in n} | {"not solved": "//"}  # its first member's, hatched
    colours.update({"borderline": "#777777", "none": "#bbbbbb", "not solved": "#ffffff"})
    order = [*names, "borderline", "none", "not solved"]
    for ax, kind in zip(axes[:, 0], kinds):
        group = [s for s in summary if s["model"] == kind]
        labels = [f"{s['architecture']}, d = {s['d']} ({s['trained']} run{'s' * (s['trained'] != 1)})"
                  for s in group]
        shown = set()
        for y, s in enumerate(group):
            total = s["trained"] or 1
            unsolved = s["trained"] - int(s["solved"].split(" of ")[0]) if s["trained"] else 0
            left = 0.0
            for name in order:
                k = unsolved if name == "not solved" else s["names"].get(name, 0)
                if k:
                    ax.barh(y, k / total, left=left, height=0.7, color=colours[name],
                            edgecolor="#333333", linewidth=0.6, hatch=hatch.get(name))
                    left += k / total
                    shown.add(name)
            if not s["trained"]:
                ax.text(0.02, y, "not trained yet", va="center", fontsize=8, color="#555555")
        ax.set_yticks(range(len(group)), labels, fontsize=9)
        ax.set_ylim(len(group) - 0.5, -0.5)
        ax.set_xlim(0, 1)
        ax.set_title(KINDS[kind], fontsize=10)
        if ax is axes[-1, 0]:
            ax.set_xlabel("share of trained runs", fontsize=9)
        patches = [plt.Rectangle((0, 0), 1, 1, facecolor=colours[n], edgecolor="#333333",
                                 linewidth=0.6, hatch=hatch.get(n)) for n in order if n in shown]
        ax.legend(patches, [n for n in order if n in shown], fontsize=8, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.savefig(path, dpi=130, bbox_inches="tight")  # the legends outside the axes included
    plt.close(fig)


def write(rows: list[dict], folder: Path) -> list[Path]:
    """``census_standard.{json,md,png}`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    summary = summarize(rows)
    paths = [folder / f"census_standard.{ext}" for ext in ("json", "md", "png")]
    nones = unnamed(rows)
    paths[0].write_text(json.dumps({"summary": summary, "unnamed": nones, "runs": rows}, indent=1)
                        + "\n")
    lines = ["# Census on standard transformers, beside the disentangled census", "",
             "Standard 2-layer attention-only transformers without LayerNorm (d_model 64; "
             "analyses/grids/census_standard.toml) and the disentangled census's models "
             "(assets/census.json) at the same d. A standard run's mechanism is named by the "
             "library's rule on the disentangled model its weights map to exactly "
             "(docs/standard.md); a model with 2 heads per layer maps to one with 2 heads per "
             "layer, where the rule tests placements (docs/shapes.md). Counts of the solved runs "
             "with Wilson 95% intervals; *same under* a style: solved runs whose construction "
             "(placement aside) is the same under mean or resample ablation. "
             "*Minimal circuit faithful*: solved runs whose minimal-circuit search (its "
             "candidates are the cells whose removal alone moves the loss) found a set of cells that "
             "alone gets rows exact >= 99% and loss recovered >= 80%, and the sizes of those sets. "
             f"W_OV effective rank: the fewest singular values of W_V W_O holding {EFFECTIVE:.0%} of "
             "its squared norm, over every head of every trained run; d_head bounds its rank, and "
             "D0 = d + T is the width of the stream [x, pos] a first-layer head copies. *W_OV full "
             "rank*: heads whose W_OV has rank d_head (singular values above 1e-6 of the largest).",
             "",
             "| model | d | architecture | runs | trained | solved | median steps | named | "
             "borderline | none | names | same under mean | same under resample | "
             "minimal circuit faithful | its cells | d_head | D0 | W_OV effective rank | "
             "W_OV full rank |",
             "|" + " --- |" * 19]
    for s in summary:
        names = ", ".join(f"{n} {k}" for n, k in s["names"].items()) or "-"
        cells = [s["model"], s["d"], s["architecture"], s["runs"], s["trained"], s["solved"],
                 s["median steps to solve"], s["named"], s["borderline"], s["none"], names,
                 s["same under mean"], s["same under resample"], s["minimal circuit faithful"],
                 s["its cells"], s["d_head"], s["D0"],
                 s["W_OV effective rank"], s["W_OV full rank"]]
        lines.append("| " + " | ".join("-" if c is None or str(c).startswith("0 of 0")
                                        else str(c) for c in cells) + " |")
    if nones:
        lines += ["", "Solved runs the rule names none, by what their minimal-circuit search found "
                  "(a faithful circuit inside a tested construction's cells, whose other cells the "
                  "run does not carry; one outside every construction; or none among its "
                  "candidates; the disentangled census's records do not say which construction's "
                  "cells hold a circuit):", "",
                  "| model | architecture | none | faithful minimal circuit | inside a construction's "
                  "cells | outside the registry (sizes) | no faithful circuit |",
                  "|" + " --- |" * 7]
        for n in nones:
            inside = ", ".join(f"{c} {k}" for c, k in n["constructions"].items())
            sizes = ", ".join(map(str, n["sizes outside"]))
            within, outside = (("-" if v is None else v) for v in (
                n["inside a construction's cells"], n["outside the registry"]))
            lines.append(f"| {n['model']} | {n['architecture']} | {n['none']} | "
                         f"{n['faithful minimal circuit']} | {within}"
                         f"{f' ({inside})' if inside else ''} | {outside}"
                         f"{f' ({sizes})' if sizes else ''} | {n['no faithful circuit']} |")
    untrained = [r["run"] for r in rows if not r["finished"]]
    if untrained:
        lines += ["", f"{len(untrained)} of {sum(r['architecture'] != DISENTANGLED for r in rows)} "
                  "standard runs of the grid were not trained when this was written "
                  "(`make census-standard` resumes them)."]
    paths[1].write_text("\n".join(lines) + "\n")
    plot(summary, paths[2])
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the standard census sweep's output folder, or "
                        "a census_standard.json with --from-json")
    parser.add_argument("--census", type=Path, default=ASSETS / "census.json",
                        help="the disentangled census (default assets/census.json)")
    parser.add_argument("--from-json", action="store_true",
                        help="the standard runs' rows from a census_standard.json this script wrote "
                        "(the disentangled ones from --census again)")
    parser.add_argument("--update-assets", action="store_true", help="write into assets/")
    args = parser.parse_args(argv)
    try:
        out = report_folder(args.folder, args.from_json, args.update_assets)
    except ValueError as err:
        print(f"census_standard_report: error: {err}", file=sys.stderr)
        return 2
    if args.from_json:
        rows = rows_from_json(args.folder)
    elif not (args.folder / "sweep.jsonl").is_file():
        print(f"{args.folder} has no sweep.jsonl: run `invperm sweep "
              f"analyses/grids/census_standard.toml --out {args.folder}` first", file=sys.stderr)
        return 2
    else:
        rows = standard_rows(args.folder)
    if not rows:
        print(f"no runs in {args.folder}", file=sys.stderr)
        return 1
    rows += disentangled_rows(json.loads(args.census.read_text()), {r["d"] for r in rows})
    for path in write(rows, out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
