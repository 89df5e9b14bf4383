"""``invperm sweep-report DIR``: a sweep's ``sweep.jsonl`` as Markdown tables and a figure, with the
index page (``DIR/index.html``) that shows the same tables in a browser.

The tables and labels are the index's (``viz.index``): one row per model kind (runs, how many
learn the task, their median steps, the runs per mechanism the rule names), then one row per run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .collect import SweepRow, read_rows


def _varying(rows: list[SweepRow]) -> list[tuple[str, str]]:
    """The (section, field) pairs whose value differs between runs (seed and folder excluded)."""
    keys = []
    for section in ("model", "train"):
        for key in getattr(rows[0], section):
            if key not in ("seed", "out_dir") and len(
                    {json.dumps(getattr(r, section).get(key)) for r in rows}) > 1:
                keys.append((section, key))
    return keys


def _value(r: SweepRow, section: str, key: str):
    v = getattr(r, section).get(key)
    if section == "model" and key == "layout":
        return v["d"]
    return v


def _markdown_table(header: list[str], rows: list[list]) -> list[str]:
    cells = [[str(c).replace("|", "\\|") for c in row] for row in rows]
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *("| " + " | ".join(row) + " |" for row in cells)]


def write_sweep_report(folder: str | Path) -> tuple[Path, Path]:
    """``DIR/sweep_report.md`` (one row per model kind, then one per run), ``DIR/index.html`` (the
    same tables, each run linked to its report once it has one) and ``DIR/sweep_report.{png,svg}``
    (steps to solve and the mechanism at each point of the grid, ``viz.sweep.plot_sweep``, against
    ``d`` or else the first varying numeric setting)."""
    from ..viz.heatmaps import save_figures
    from ..viz.index import GROUP_HEADER, RUN_HEADER, run_texts, write_index
    from ..viz.sweep import MEDIAN_IS, group_rows, plot_sweep
    from .run_rows import find_runs, index_title

    folder = Path(folder)
    records = {row.name: row for _, row in read_rows(folder)}
    if not records:
        raise ValueError(f"{folder}/sweep.jsonl lists no runs")
    runs = find_runs(folder)
    first = next(iter(records.values()))
    varying = _varying(list(records.values()))
    numeric = [(s, k) for s, k in varying if all(
        isinstance(_value(r, s, k), (int, float)) for r in records.values())]
    x_key = ("model", "layout") if ("model", "layout") in varying else (numeric[0] if numeric else None)
    lines = [f"# Sweep {folder.name}", "",
             f"{len(runs)} runs; solved = evaluation MSE < {first.solve_mse:g}; varying: "
             + (", ".join(f"{s}.{k}" for s, k in varying) or "seed only")
             + f". The same tables, each run linked to its report: {folder.as_posix()}/index.html.", "",
             *_markdown_table(GROUP_HEADER, group_rows(runs)), "",
             f"The median is {MEDIAN_IS}.", "",
             *_markdown_table(RUN_HEADER, [run_texts(folder, r) for r in runs])]
    md = folder / "sweep_report.md"
    md.write_text("\n".join(lines) + "\n")

    x_label = (("d (task size)" if x_key == ("model", "layout") else f"{x_key[0]}.{x_key[1]}")
               if x_key else "run")
    points = [{"group": r.group, "seed": r.seed, "steps_to_solve": r.steps_to_solve,
               "steps": r.steps, "mechanism": r.mechanism,
               "d": _value(records[Path(os.path.relpath(r.dir, folder)).as_posix()], *x_key) if x_key else i}
              for i, r in enumerate(runs)]
    fig = plot_sweep(points, first.solve_mse, f"sweep {folder.name}: {len(runs)} runs", x_label)
    png, _ = save_figures(fig, folder / "sweep_report.png")
    # after the figure, so the index shows and links it (as `invperm report` writes it again)
    write_index(folder, runs, index_title(folder))
    return md, png
