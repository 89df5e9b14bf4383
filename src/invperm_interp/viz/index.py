"""The index page of a directory of runs (a sweep, a census): a headline saying what the runs
reached, one sortable table linking every run's report, and a figure (steps to solve against d, or,
when the runs share one d, their training curves).

The page renders the rows it is handed (``RunRow``, read by ``sweep.run_rows.find_runs`` from a
``sweep.jsonl`` or the run directories below a folder). For each run the table shows the model,
the final MSE against the causal floor, rows exact, the first eval step with MSE below the target,
and the mechanism when an analysis has named one.
"""

from __future__ import annotations

import html
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..labels import excess_parts, excess_text
from ..runs.directory import RunDir
from .curves import AT_FLOOR, SOLVED_BELOW
from .html import figure, table
from .page import page
from .sweep import GROUP_HEADER, MEDIAN_IS, group_rows, how_text, median_steps, plot_sweep
from .training import plot_runs

if TYPE_CHECKING:  # the rows are read above this stage (sweep.run_rows); the page only renders them
    from ..sweep.run_rows import RunRow

_SORT_JS = """
document.querySelectorAll('table.sortable th').forEach((th, col) => {
  th.addEventListener('click', () => {
    const body = th.closest('table').tBodies[0];
    const key = tr => tr.cells[col].dataset.sort ?? tr.cells[col].textContent;
    const up = th.dataset.dir !== 'up'; th.dataset.dir = up ? 'up' : 'down';
    const rows = [...body.rows].sort((a, b) => {
      const x = key(a), y = key(b), nx = parseFloat(x), ny = parseFloat(y);
      const c = (isNaN(nx) || isNaN(ny)) ? x.localeCompare(y) : nx - ny;
      return up ? c : -c; });
    rows.forEach(r => body.appendChild(r));
  });
});
"""


def _breakable(name: str) -> str:
    """``name`` escaped, with line-break chances after ``_`` and ``/`` (long run and mechanism names
    wrap inside a narrow column instead of widening the table)."""
    return html.escape(name).replace("_", "_<wbr>").replace("/", "/<wbr>")


def _td(text: str, sort: float | str | None = None, num: bool = False, cls: str = "") -> str:
    key = "" if sort is None else f' data-sort="{html.escape(str(sort))}"'
    classes = " ".join(c for c in ("num" if num else "", cls) if c)
    cls = f' class="{classes}"' if classes else ""
    return f"<td{cls}{key}>{text}</td>"


def _solve_text(r: RunRow) -> str:
    if r.steps_to_solve is not None:
        return str(r.steps_to_solve)
    if r.status is not None:
        return f"{r.status} at step {r.steps}"
    return "not solved" if r.solvable else f"cannot: floor {r.causal_floor:.4g}"


def _group_sentence(group: str, runs: list[RunRow]) -> str:
    """What one model kind reached, in words."""
    name = f"<b>{html.escape(group)}</b>"
    solved = [r for r in runs if r.solved]
    floored = [r for r in runs if r.at_floor]
    if len(runs) == 1:
        r = runs[0]
        if r.mse is None:
            return f"The {name} model has no evaluation yet."
        exact = "" if r.row_acc is None else f", {r.row_acc:.1%} of rows exact"
        how = "" if r.mechanism is None else f" Mechanism by the rule: {_breakable(r.mechanism)}."
        if r.solved:
            return f"The {name} model <b>learns the task</b>: final MSE {r.mse:.3g}{exact}.{how}"
        if r.at_floor:
            return (f"The {name} model <b>sits on its causal floor</b>: "
                    f"{html.escape(excess_text(r.mse, r.causal_floor))}. Under the mask a read-out "
                    "row cannot see the input rows it needs (Lemma 1), so no model can do better."
                    + how)
        return f"The {name} model does not learn the task: final MSE {r.mse:.3g}{exact}.{how}"
    parts = []
    if any(r.solvable for r in runs):
        median = median_steps(r.steps_to_solve for r in solved if r.steps_to_solve is not None)
        parts.append(f"{len(solved)} of {len(runs)} runs <b>learn the task</b> "
                     f"(MSE &lt; {SOLVED_BELOW:g})"
                     + ("" if median is None else f" in a median {median:,g} steps"))
    if floored or not all(r.solvable for r in runs):
        parts.append(f"{len(floored)} of {len(runs)} end <b>on their causal floor</b> (within "
                     f"{AT_FLOOR:.0%}; under the mask no model can do better)")
    parts.append(f"mechanism by the rule: {html.escape(how_text(runs))}")
    return f"{name}: {'; '.join(parts)}."


def index_headline(rows: list[RunRow]) -> str:
    """The main result of the runs, one sentence per model kind (bidirectional ones first)."""
    groups: dict[str, list[RunRow]] = {}
    for r in sorted(rows, key=lambda r: (r.causal, r.group)):
        groups.setdefault(r.group, []).append(r)
    body = " ".join(_group_sentence(g, runs) for g, runs in groups.items())
    return f'<h2>Headline</h2><div class="headline"><p>{body}</p></div>'


def _by_d(rows: list[RunRow]) -> bool:
    """Whether the index draws steps to solve against d (the runs that can solve span several d)."""
    return len({r.d for r in rows if r.solvable}) > 1


def _figure(root: Path, rows: list[RunRow]) -> str:
    """Steps to solve against d; when the runs share one d, their training curves instead (a
    single column of dots says nothing)."""
    plotted = [r for r in rows if r.solvable]
    how = any(r.mechanism is not None for r in plotted)
    if _by_d(rows):
        return figure(
            plot_sweep([{"group": r.group, "d": r.d, "seed": r.seed, "steps": r.steps,
                         "steps_to_solve": r.steps_to_solve, "mechanism": r.mechanism}
                        for r in plotted], SOLVED_BELOW),
            f"Steps to MSE below {SOLVED_BELOW:g} against d, one colour per model and one marker "
            "per seed; runs that never got there sit in the strip on top"
            + ("; below, each d's runs of each model stacked by the mechanism the rule names."
               if how else "."),
            "Steps to solve by d" + (". Hollow markers in the top strip: not solved in the run's "
                                     "steps" if any(r.steps_to_solve is None for r in plotted)
                                     else "")
            + (". Below: how, the runs of each model and d counted by mechanism, one colour per "
               "name, the bar's edge in its model's colour." if how else "."))
    curves = {os.path.relpath(r.dir, root): RunDir(r.dir).read_metrics() for r in rows}
    curves = {name: m for name, m in curves.items() if m}
    if not curves:
        return ""
    causal = {os.path.relpath(r.dir, root) for r in rows if r.causal}
    return figure(
        plot_runs(curves, causal), "Eval MSE against step for every run (log scale), and, for causal runs, "
        "their excess over the causal floor.",
        "Training curves: eval MSE of each run on its fixed eval batch"
        + ("; right: the causal runs' excess over their floor, where a run on its floor is a flat "
           "line at 0." if any(r.causal and (r.causal_floor or 0) > 0 for r in rows) else "."))


def _sweep_report(root: Path) -> str:
    """The sweep's own report (``invperm sweep-report DIR``: ``sweep_report.md`` and its figure
    against the grid's varying setting), shown and linked when the folder holds it."""
    png = root / "sweep_report.png"
    if not png.is_file():
        return ""
    links = [f'<a href="{name}">{name}</a>' for name in ("sweep_report.md", "sweep_report.svg")
             if (root / name).is_file()]
    return ("<h2>Sweep report</h2><p class='meta'>Written by <code>invperm sweep-report</code>: "
            "steps to solve and the mechanism at each point of the grid"
            + (f" ({', '.join(links)})" if links else "") + ".</p>"
            '<figure><a href="sweep_report.png"><img src="sweep_report.png" alt="The sweep report\'s '
            'figure: steps to solve at each point of the grid, and the mechanism the rule names there"'
            ' style="max-width: 100%; height: auto"></a></figure>')


def twin(rows: list[RunRow], run: RunRow) -> RunRow | None:
    """``run``'s twin among ``rows``: the same model configuration, training settings and seed with
    the other attention direction (the bidirectional model beside the causal one)."""
    other = {"causal": "bidirectional", "bidirectional": "causal"}[run.model.attention_dir]
    model = replace(run.model, attention_dir=other)
    return next((r for r in rows if r.model == model and r.training == run.training
                 and r.seed == run.seed), None)


def report_links(root: str | Path, rows: list[RunRow], run: RunRow) -> list[tuple[str, str]]:
    """The navigation of ``run``'s report: back to ``root``'s index and to its twin's report (when
    the twin has weights to report on)."""
    links = [("↑ all runs", os.path.relpath(Path(root) / "index.html", run.dir))]
    other = twin(rows, run)
    twin_dir = None if other is None else RunDir(other.dir)
    if twin_dir is not None and (twin_dir.report.is_file() or twin_dir.is_finished):
        links.append((f"twin: the {other.model.attention_dir} model",
                      os.path.relpath(twin_dir.report, run.dir)))
    return [(label, Path(url).as_posix()) for label, url in links]


RUN_HEADER = ["run", "model", "d", "seed", "steps", "final MSE", "rows exact",
              f"steps to MSE < {SOLVED_BELOW:g}", "mechanism"]


def run_texts(root: Path, r: RunRow) -> list[str]:
    """The run's cells under :data:`RUN_HEADER`, as plain text (the index's run table and the
    sweep report's)."""
    mse = "—" if r.mse is None else excess_text(r.mse, r.causal_floor if r.causal else None)
    how = (r.mechanism or "—") + "".join(f" ({style}: {name})" for style, name in r.other_styles)
    return [os.path.relpath(r.dir, root), r.group, str(r.d), str(r.seed), str(r.steps), mse,
            "—" if r.row_acc is None else f"{r.row_acc:.1%}", _solve_text(r), how]


def excess_remark(rows: list[RunRow]) -> str:
    """What the excess in a causal run's "floor + excess" is, when the page writes one (a causal
    run with a floor above 0 and an MSE), in plain text; ``""`` when it writes none."""
    shown = [r for r in rows if r.causal and (r.causal_floor or 0) > 0 and r.mse is not None
             and math.isfinite(r.mse)]
    if not shown:
        return ""
    share = max(abs(r.mse - r.causal_floor) / r.causal_floor for r in shown)
    below = any(r.mse < r.causal_floor for r in shown)
    return ("The floor is the least MSE any causally masked model can reach (Theorem 1); the excess "
            "is the rest, the part training could still remove"
            + (" (below 0: the fixed eval batch's sampling noise)" if below else "")
            + f", here at most {100 * share:.2g}% of the floor. It moves with the random training "
            "batches and can rise as well as fall, so it differs between runs and with the step a "
            "run stops at.")


def _group_table(rows: list[RunRow]) -> str:
    """The runs counted per model kind, when some kind has more than one run."""
    groups = group_rows(rows)
    if all(g[1] == 1 for g in groups):
        return ""
    return table(GROUP_HEADER, groups, f"<b>By model.</b> The median is {MEDIAN_IS}.")


def index_html(directory: str | Path, rows: list[RunRow], title: str | None = None) -> str:
    """The index page (a string) for ``rows`` found under ``directory``."""
    root = Path(directory)
    title = title or f"Runs in {root}"
    body = []
    for r in rows:
        report = RunDir(r.dir).report
        name, _, _, _, _, mse, exact, solve, _ = run_texts(root, r)
        link = (f'<a href="{html.escape(os.path.relpath(report, root))}">{_breakable(name)}</a>'
                if report.is_file() else f"{_breakable(name)} <span class='meta'>(no report)</span>")
        if r.mse is not None:  # the floor and the excess may wrap as one piece: a narrower column
            value, rest = excess_parts(r.mse, r.causal_floor if r.causal else None)
            mse = html.escape(value) + ("" if rest is None else
                                        f" = <span class='nowrap'>{html.escape(rest)}</span>")
        body.append("<tr>" + "".join([
            _td(link, html.escape(name)), _td(html.escape(r.group)), _td(str(r.d), r.d, True),
            _td(str(r.seed), r.seed, True), _td(str(r.steps), r.steps, True),
            _td(mse, "inf" if r.mse is None else r.mse, True, cls="wrap"),
            _td(exact, r.row_acc or 0, True),
            _td(solve, "inf" if r.steps_to_solve is None else r.steps_to_solve, True, cls="wrap"),
            _td(_breakable(r.mechanism or "—") + "".join(
                f" <span class='meta'>({html.escape(style)}: {_breakable(name)})</span>"
                for style, name in r.other_styles), r.mechanism or "—"),
        ]) + "</tr>")
    header = RUN_HEADER
    head = "".join(f"<th title='click to sort'>{html.escape(h)}</th>" for h in header)
    solved = sum(r.steps_to_solve is not None for r in rows)
    cannot = sum(not r.solvable for r in rows)
    parts = [
        index_headline(rows),
        f"<p class='meta'>{len(rows)} run{'s' if len(rows) != 1 else ''}; {solved} reached MSE "
        f"&lt; {SOLVED_BELOW:g}"
        + (f"; {cannot} causal run{'s' if cannot != 1 else ''} cannot (the causal floor is above "
           "it)" + (f" and {'stay' if cannot != 1 else 'stays'} out of the steps-to-solve figure"
              if _by_d(rows) else "") if cannot else "") + ". "
        "Click a column header to sort; a run's name opens its report. Final MSE is on the run's "
        "eval batch at its last step; for causal runs it is written against the causal floor."
        + (f" {html.escape(remark)}" if (remark := excess_remark(rows)) else "")
        + (" In brackets after a mechanism: the name the rule gives under mean or resample "
           "ablation of the cells outside the circuit, where it differs."
           if any(r.other_styles for r in rows) else "") + "</p>",
        _figure(root, rows),
        _sweep_report(root),
        _group_table(rows),
        f"<div class='table'><table class='sortable'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"]
    return page(title, "\n".join(p for p in parts if p), style=" th { cursor: pointer; }",
                script=_SORT_JS)


def write_index(directory: str | Path, rows: list[RunRow], title: str | None = None) -> Path:
    """Write ``directory/index.html`` for ``rows``, the runs under it (``sweep.run_rows.find_runs``;
    ``title``: default ``"Runs in DIR"``, ``run_rows.index_title`` names a sweep's)."""
    root = Path(directory)
    path = root / "index.html"
    path.write_text(index_html(root, rows, title), encoding="utf-8")
    return path
