"""``invperm sweep-report DIR``: a sweep's ``sweep.jsonl`` as a Markdown table and a figure."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from .collect import read_sweep

COLUMNS = ("name", "status", "step", "steps_to_solve", "final_mse", "rows_exact", "mechanism")


def _row(r: dict) -> dict:
    final = r["final"]  # an Evaluation (read_sweep), or None
    return {"name": r["name"], "status": r["status"], "step": r["step"],
            "steps_to_solve": r["steps_to_solve"], "final_mse": final and final.mse,
            "rows_exact": final and final.row_acc, "mechanism": r.get("mechanism")}


def _fmt(v) -> str:
    if v is None:
        return "–"
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _varying(rows: list[dict]) -> list[tuple[str, str]]:
    """The (section, field) pairs whose value differs between runs (seed excluded)."""
    keys = []
    for section in ("model", "train"):
        for key in rows[0][section]:
            if key != "seed" and len({json.dumps(r[section].get(key)) for r in rows}) > 1:
                keys.append((section, key))
    return keys


def _value(r: dict, section: str, key: str):
    v = r[section].get(key)
    if section == "model" and key == "layout":
        return v["d"]
    return v


def write_sweep_report(folder: str | Path) -> tuple[Path, Path]:
    """``DIR/sweep_report.md`` (one row per run, then solved counts per group) and
    ``DIR/sweep_report.{png,svg}`` (steps to solve against the first varying numeric field,
    ``viz.sweep.plot_sweep``: unsolved runs apart, not drawn at their last step)."""
    from ..viz.heatmaps import save_figures
    from ..viz.sweep import plot_sweep

    folder = Path(folder)
    runs = [record for _, record in read_sweep(folder)]
    if not runs:
        raise ValueError(f"{folder}/sweep.jsonl lists no runs")
    solve = runs[0]["solve_mse"]
    varying = _varying(runs)
    numeric = [(s, k) for s, k in varying if all(
        isinstance(_value(r, s, k), (int, float)) for r in runs)]
    x_key = ("model", "layout") if ("model", "layout") in varying else (numeric[0] if numeric else None)
    group_keys = [k for k in varying if k != x_key]
    rows = [_row(r) for r in runs]
    lines = [f"# Sweep {folder.name}", "",
             f"{len(runs)} runs; solved = evaluation MSE < {solve:g}; varying: "
             + (", ".join(f"{s}.{k}" for s, k in varying) or "seed only"), "",
             "| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(_fmt(r[c]) for c in COLUMNS) + " |" for r in rows]
    groups: dict[str, list[dict]] = {}
    for r in runs:
        label = ", ".join(f"{k}={_fmt(_value(r, s, k))}" for s, k in group_keys) or "all"
        groups.setdefault(label, []).append(r)
    lines += ["", "| group | solved | median steps to solve |", "| --- | --- | --- |"]
    for label, members in groups.items():
        steps = sorted(r["steps_to_solve"] for r in members if r["steps_to_solve"] is not None)
        median = statistics.median(steps) if steps else None  # the mean of the middle two
        lines.append(f"| {label} | {len(steps)} of {len(members)} | "
                     f"{'-' if median is None else f'{median:g}'} |")
    md = folder / "sweep_report.md"
    md.write_text("\n".join(lines) + "\n")

    x_label = (("d (task size)" if x_key == ("model", "layout") else f"{x_key[0]}.{x_key[1]}")
               if x_key else "run")
    points = [{"group": label, "d": _value(r, *x_key) if x_key else i, "seed": r["train"].get("seed"),
               "steps_to_solve": r["steps_to_solve"], "steps": r["step"]}
              for label, members in groups.items() for i, r in enumerate(members)]
    fig = plot_sweep(points, solve, f"sweep {folder.name}: {len(runs)} runs", x_label)
    png, _ = save_figures(fig, folder / "sweep_report.png")
    return md, png
