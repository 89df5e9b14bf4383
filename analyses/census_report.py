"""The census's report: reads a census sweep's ``sweep.jsonl`` (``invperm sweep
analyses/grids/census.toml``, whose analysis stage recorded each run's mechanism, faithfulness and
minimal circuit) and writes ``census.{json,md,png,svg}`` next to it, or into ``assets/`` with
``--update-assets``. It trains and analyses nothing. ``--from-json`` rebuilds the report from a
``census.json`` it wrote (its per-run rows and planned counts), beside that JSON, so the committed
Markdown and figure can be regenerated when only the report's wording changes; a JSON in
``assets/`` is rewritten only with ``--update-assets``.

    python analyses/census_report.py runs/census [--update-assets]
    python analyses/census_report.py assets/census.json --from-json --update-assets
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from common import fmt, report_folder  # noqa: E402

from invperm_interp.analysis.controls import wilson  # noqa: E402
from invperm_interp.analysis.hypothesis import cell_text  # noqa: E402
from invperm_interp.analysis.mechanism import is_minimal, name_by_rule, verdict_of  # noqa: E402
from invperm_interp.analysis.score import read_score  # noqa: E402
from invperm_interp.analysis.sweep_record import SweepRecord  # noqa: E402
from invperm_interp.analysis.verdict import Rule, Z  # noqa: E402
from invperm_interp.maths import registry  # noqa: E402
from invperm_interp.sweep.collect import read_rows  # noqa: E402

KINDS = {"bidirectional": "bidirectional [P; Y_P], reads P", "scratch": "causal [P; Y_P; S], reads S"}


def census_rows(folder: Path) -> tuple[list[dict], dict[tuple[str, int], int]]:
    """One row per analysed run of the sweep, and the number of runs planned per (model, d);
    ``ValueError`` when its ``sweep.jsonl`` is missing, not run records, or lists no runs (as
    ``invperm sweep-report`` refuses it)."""
    rows, planned = [], Counter()
    records = read_rows(folder)
    if not records:
        raise ValueError(f"{folder}/sweep.jsonl lists no runs")
    for _, line in records:
        kind = "bidirectional" if line.model["attention_dir"] == "bidirectional" else "scratch"
        d = line.model["layout"]["d"]
        planned[(kind, d)] += 1
        if line.status == "unfinished" or not line.analysis or line.mechanism is None:
            continue
        try:
            analysis = SweepRecord.from_dict(line.analysis)
        except ValueError as err:
            raise ValueError(f"{line.name}: {err}") from None
        rows.append({"run": line.name, "kind": kind, "d": d, "seed": line.train["seed"],
                     "step": line.step, "steps_to_target": line.steps_to_solve,
                     "final_mse": line.final and line.final.mse,
                     "rows_exact": line.final and line.final.row_acc,
                     "mechanism": _text(analysis.answer), **run_columns(analysis)})
    return rows, dict(planned)


def run_columns(record: SweepRecord) -> dict:
    """A run's columns of ``census.json`` from the sweep's record: the named construction's scores,
    the minimal circuit, every tested construction's scores and verdict, the names on more batches
    and under the other ablation styles."""
    mech, m = record.mechanism, record.mechanism.minimal
    f = mech.faithfulness if mech.name is not None else None
    rule = mech.rule
    return {
        "samples": record.samples, "batches": record.batches, "mean_ablation": "mean" in record.under,
        "also_faithful": list(mech.also_faithful), "borderline": list(mech.borderline),
        "circuit_mse": f and f.circuit.mse, "circuit_rows_exact": f and f.circuit.rows_exact,
        "loss_recovered": f and f.circuit.loss_recovered, "without_mse": f and f.without.mse,
        "minimal_named": f and is_minimal(f), "minimal_size": m.size,
        "minimal_faithful": m.faithful, "minimal_optimal": m.optimal,
        "minimal_candidates": m.candidates, "minimal_evaluations": m.evaluations,
        "minimal_rows_exact": m.score.rows_exact, "minimal_loss_recovered": m.score.loss_recovered,
        "minimal_weight_share": m.weight_share, "minimal_read": list(m.read),
        "minimal_cells": [cell_text(c) for c in m.cells],
        "tested": tested_columns(mech.tested, rule),
        "names_by_batch": [_text(a) for a in record.names_by_batch],
        "name_mean_ablation": _text(record.under.get("mean")),
        "resample_ablation": "resample" in record.under,
        "name_resample_ablation": _text(record.under.get("resample")),
        **{f"tested_{style}": tested_columns(record.tested_under[style], rule)
           for style in record.tested_under},
        **{f"without_{style}": _without(record.named_test(style)) for style in record.tested_under},
        **{("empty" if style == "zero" else f"empty_{style}"): tested_columns([found], rule)[0]
           for style in ("zero", *record.tested_under) if (found := record.empty(style)) is not None}}


def tested_columns(tested, rule) -> list[dict]:
    """Each construction test's scores and verdict as ``census.json`` keeps them."""
    return [{"name": t.hypothesis, "rows_exact": t.circuit.rows_exact, "rows_se": t.circuit.rows_se,
             "loss_recovered": t.circuit.loss_recovered, "recovered_se": t.circuit.recovered_se,
             "n": t.circuit.n, "signs_agree": t.signs_agree, "n_atoms": t.n_atoms,
             "verdict": verdict_of(t, rule)} for t in tested]


def _without(test) -> float | None:
    """The loss the model recovers less the named circuit (its test's ``without``), if run."""
    return None if test is None or test.without is None else test.without.loss_recovered


def _text(answer) -> str | None:
    """An answer as the census counts it: a tie as its set, names in alphabetical order (which
    one a batch put first is the tie-break's, not a finding), so one tie is one name in every
    style and batch."""
    if answer is None:
        return None
    return " = ".join(sorted(answer.names)) if answer.tied else str(answer)


def flips(names: list[str]) -> bool:
    """Whether two batches name disjoint sets of constructions (a name and a tie holding it, as
    ``a`` and ``a = b``, do not flip; ``none`` is a name of its own, ``borderline`` set aside)."""
    sets = [set(n.split(" = ")) for n in names if n != "borderline"]
    return any(not a & b for i, a in enumerate(sets) for b in sets[i + 1:])


def rows_from_json(path: Path) -> tuple[list[dict], dict[tuple[str, int], int]]:
    """The rows and planned counts a ``census.json`` was written from."""
    data = json.loads(path.read_text())
    return data["runs"], {(s["model"], s["d"]): s["planned"] for s in data["summary"]}


def _median_text(values) -> str:
    """:func:`_median` to 3 decimals; "-" when no value was measured."""
    median = _median(values)
    return "-" if median is None else f"{median:.3f}"


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def share_text(k: int, n: int) -> str:
    """``"58 of 64 (82–96%)"``: a count with its Wilson 95% interval."""
    lo, hi = wilson(k, n)
    return f"{k} of {n} ({lo:.0%}–{hi:.0%})"


def name_at(row: dict, rows_min: float, recovered_min: float) -> str:
    """The rule's name for a run from its recorded tests, at other thresholds (the library's rule,
    ``analysis.mechanism.name_by_rule``, on the recorded scores and standard errors)."""
    rule = Rule(rows_min, recovered_min, row.get("z", Z))
    return str(name_by_rule(recorded_tests(row), rule, recorded_empty(row)))


def recorded_tests(row: dict, key: str = "tested") -> list:
    """A run's recorded construction tests (``key``: ``tested``, zero ablation, or
    ``tested_mean``/``tested_resample``), as ``analysis.mechanism.name_by_rule`` reads them."""
    return [SimpleNamespace(hypothesis=t["name"], signs_agree=t["signs_agree"], n_atoms=t["n_atoms"],
                            circuit=read_score({"mse": 0.0, "n": t["n"], **{k: t[k] for k in (
                                "rows_exact", "rows_se", "loss_recovered", "recovered_se")}}))
            for t in row[key]]


def recorded_empty(row: dict, key: str = "tested") -> SimpleNamespace | None:
    """The empty claim's recorded test beside ``key``'s (``analysis.controls``; None in a census
    written before it was run), as ``name_by_rule`` reads it."""
    found = row.get("empty" + key.removeprefix("tested"))
    return None if found is None else recorded_tests({"x": [found]}, "x")[0]


def without_recovered(row: dict) -> float | None:
    """The loss recovered by the run's model with its named circuit zeroed (completeness under zero
    ablation), from the recorded MSEs: the clean model's MSE is what makes the circuit's loss
    recovered, ``baseline - (baseline - circuit_mse) / loss_recovered``, baseline ``d/4``."""
    if row.get("without_mse") is None or not row.get("loss_recovered"):
        return None
    baseline = row["d"] / 4
    clean = baseline - (baseline - row["circuit_mse"]) / row["loss_recovered"]
    return (baseline - row["without_mse"]) / (baseline - clean)


def ties(rows: list[dict]) -> list[dict]:
    """Per model and ablation style: solved runs named under it, those with another faithful
    construction (zero ablation), and those whose named construction is tied with one
    (``analysis.ties``), recounted from the recorded intervals (under mean and resample ablation
    from the tests the sweep kept beside the name; a record without them is left out)."""
    out = []
    for kind in KINDS:
        solved = [r for r in rows if r["kind"] == kind and r["steps_to_target"] is not None]
        for style, key in (("zero", "tested"), ("mean", "tested_mean"), ("resample", "tested_resample")):
            answers = [name_by_rule(recorded_tests(r, key), empty=recorded_empty(r, key))
                       for r in solved if key in r]
            named = [a for a in answers if a.name is not None]
            if style != "zero" and not answers:
                continue
            also = (str(sum(bool(r["also_faithful"]) for r in solved
                            if r["mechanism"] not in ("none", "borderline")))
                    if style == "zero" else "-")
            out.append({"model": kind, "style": style, "named": len(named),
                        "another construction faithful too": also,
                        "tied (intervals overlap)": share_text(sum(bool(a.tied) for a in named),
                                                               len(named)),
                        "ties": ", ".join(sorted({_text(a) for a in named if a.tied})) or "-"})
    return out


#: The forms found in this census's unnamed scratch runs and registered after them
#: (assets/discovery.md): the census is recounted without them to show what they add.
GUARDED = registry.GUARDED


def guarded_recount(rows: list[dict]) -> list[dict]:
    """Per style, the solved causal-scratch runs named, borderline and none by the rule from the
    recorded tests with the guarded forms (:data:`GUARDED`) and without them (the same tests, those
    forms left out), and how many the guarded form alone names (not tied)."""
    solved = [r for r in rows if r["kind"] == "scratch" and r["steps_to_target"] is not None]
    out = []
    for style, key in (("zero", "tested"), ("mean", "tested_mean"), ("resample", "tested_resample")):
        mine = [r for r in solved if key in r]
        if not mine:
            continue
        line = {"style": style, "solved": len(mine)}
        for label, leave in (("with the guarded forms", ()), ("without them", GUARDED)):
            answers = [name_by_rule([t for t in recorded_tests(r, key) if t.hypothesis not in leave])
                       for r in mine]
            verdicts = Counter(a.verdict for a in answers)
            line[f"{label}: named / borderline / none"] = (
                f"{len(mine) - verdicts['borderline'] - verdicts['none']} / {verdicts['borderline']} / "
                f"{verdicts['none']}")
            if not leave:
                line["'none' with them"] = share_text(verdicts["none"], len(mine))
                line["a guarded form alone"] = sum(a.name in GUARDED and not a.tied for a in answers)
        out.append(line)
    return out


def distinguishability() -> list[dict]:
    """Per ablation style, the registered constructions of each layout it cannot tell apart by
    their cells (``analysis.ties.untold_pairs``): alike in every cell it sees, told apart by the
    sign check only, or by nothing."""
    from invperm_interp.analysis.ties import CELLS, SIGNS, comparable, untold_pairs

    groups = (("plain", "bidirectional"), ("scratch", "causal"))
    out = []
    for style in ("zero", "mean", "resample", "scrub"):
        pairs = [p for g in groups for p in untold_pairs(comparable(*g), style)]
        signs = [f"{a} ~ {b}" for a, b, r in pairs if r == SIGNS]
        same = [f"{a} ~ {b}" for a, b, r in pairs if r not in (SIGNS, CELLS)]
        out.append({"style": style,
                    "alike in every cell it sees; only the sign check separates them":
                    ", ".join(signs) or "none",
                    "alike in cells and signs (a tie on any weights)": ", ".join(same) or "none"})
    return out


#: The thresholds (rows exact, loss recovered) the sensitivity table recounts at.
SENSITIVITY = ((0.95, 0.70), (0.99, 0.80), (0.999, 0.90))


def configurations(rows: list[dict], planned: dict[tuple[str, int], int]):
    """``(kind, d, runs)`` per planned configuration with at least one analysed run, in order."""
    for kind in KINDS:
        for d in sorted({d for k, d in planned if k == kind}):
            group = [r for r in rows if r["kind"] == kind and r["d"] == d]
            if group:
                yield kind, d, group


def summarize(rows: list[dict], planned: dict[tuple[str, int], int]) -> list[dict]:
    """One row per (kind, d): runs done, solved, median steps, mechanism counts with their
    uncertainty, borderline, stability over evaluation batches, agreement with mean and resample
    ablation, minimal circuits (optimal, sizes)."""
    out = []
    for kind, d, group in configurations(rows, planned):
        solved = [r for r in group if r["steps_to_target"] is not None]
        counts = Counter(r["mechanism"] for r in solved)
        named = [r for r in solved if r["mechanism"] not in ("none", "borderline")]
        none = [r for r in solved if r["mechanism"] == "none"]
        stable = [r for r in solved if len(set(r["names_by_batch"])) == 1]
        mean = [r for r in solved if r.get("name_mean_ablation") is not None]
        resample = [r for r in solved if r.get("name_resample_ablation") is not None]
        both = [r for r in solved if _has_all_styles(r)]
        small = [r for r in solved if r["minimal_candidates"] <= 24]
        out.append({
            "model": kind, "d": d, "runs": len(group), "planned": planned[(kind, d)],
            "solved (MSE < 1e-3)": len(solved),
            "median steps to solve": _median(r["steps_to_target"] for r in solved),
            "mechanisms (of solved)": ", ".join(f"{k}: {v}" for k, v in counts.most_common()),
            "named (95% CI)": share_text(len(named), len(solved)),
            "borderline": counts.get("borderline", 0),
            "same name on 3 batches": share_text(len(stable), len(solved)),
            "flips between two names (borderline aside)": sum(flips(r["names_by_batch"]) for r in solved),
            "same name under mean ablation": (
                f"{sum(r['name_mean_ablation'] == r['mechanism'] for r in mean)} of {len(mean)}"),
            "same name under resample ablation": (
                f"{sum(r['name_resample_ablation'] == r['mechanism'] for r in resample)} of "
                f"{len(resample)}"),
            "one name under all three ablation styles": share_text(
                sum(_styles(r) == {r["mechanism"]} and r in named for r in both), len(both)),
            "'none' under every style": share_text(sum(_styles(r) == {"none"} for r in both),
                                                   len(both)),
            "named circuit: median rows exact / loss recovered": (
                f"{_median(r['circuit_rows_exact'] for r in named):.4f} / "
                f"{_median(r['loss_recovered'] for r in named):.3f}" if named else "-"),
            "minimal circuit optimal (runs with <= 24 candidate cells)": (
                f"{sum(r['minimal_optimal'] for r in small)} of {len(small)}"),
            "'none': minimal circuit sizes": (
                ", ".join(f"{k} cells x{v}" for k, v in sorted(Counter(
                    r["minimal_size"] for r in none).items())) if none else "-"),
            "'none' with no faithful circuit": sum(not r["minimal_faithful"] for r in none),
            "named circuit removed: median loss recovered (zero / mean / resample ablation)": " / ".join(
                _median_text(values) for values in (
                    [without_recovered(r) for r in named],
                    *([r.get(f"without_{style}") for r in solved] for style in ("mean", "resample")))),
        })
    return out


def _has_all_styles(row: dict) -> bool:
    """Whether the run was named under mean and under resample ablation too."""
    return row.get("name_mean_ablation") is not None and row.get("name_resample_ablation") is not None


def _styles(row: dict) -> set[str]:
    """The names a run gets under zero (the rule's), mean and resample ablation."""
    return {row["mechanism"], row["name_mean_ablation"], row["name_resample_ablation"]}


#: The summary columns the census page quotes (``readme_table``; a test holds docs/results/census.md to it).
README_COLUMNS = ("model", "d", "solved (MSE < 1e-3)", "mechanisms (of solved)", "named (95% CI)",
                  "borderline", "same name on 3 batches", "flips between two names (borderline aside)",
                  "same name under mean ablation", "same name under resample ablation",
                  "one name under all three ablation styles", "'none' under every style",
                  "named circuit removed: median loss recovered (zero / mean / resample ablation)")


def readme_table(summary: list[dict]) -> str:
    """The census summary as docs/results/census.md quotes it: a Markdown table of ``README_COLUMNS``."""
    lines = ["| " + " | ".join(README_COLUMNS) + " |", "|" + " --- |" * len(README_COLUMNS)]
    lines += ["| " + " | ".join(fmt(s[c]) for c in README_COLUMNS) + " |" for s in summary]
    return "\n".join(lines)


def sensitivity(rows: list[dict], planned: dict[tuple[str, int], int]) -> list[dict]:
    """Per (kind, d): named / borderline / none among solved runs at each threshold pair."""
    out = []
    for kind, d, group in configurations(rows, planned):
        solved = [r for r in group if r["steps_to_target"] is not None]
        if not solved:
            continue
        line = {"model": kind, "d": d, "solved": len(solved)}
        for rows_min, rec_min in SENSITIVITY:
            names = Counter(name_at(r, rows_min, rec_min) for r in solved)
            named = len(solved) - names["none"] - names["borderline"]
            line[f"{rows_min:.1%} rows / {rec_min:.0%} loss: named / borderline / none"] = (
                f"{named} / {names['borderline']} / {names['none']}")
        out.append(line)
    return out


#: How a solved run's names under zero, mean and resample ablation agree, and each group's colour.
AGREEMENT = {"one name under all three styles": "#2b8cbe",
             "named under all three, names differ": "#a6bddb",
             "named under one or two styles": "#fdae6b",
             "'none' or borderline under every style": "0.75"}


def agreement(row: dict) -> str:
    """The :data:`AGREEMENT` group of a run with all three names."""
    names = _styles(row)
    named = names - {"none", "borderline"}
    groups = list(AGREEMENT)
    if len(names) == 1 and named:
        return groups[0]
    if named == names:
        return groups[1]
    return groups[2] if named else groups[3]


def shares(a: str, b: str) -> bool:
    """Whether two names (a construction, or a tie ``x = y``) hold a construction in common."""
    return bool(set(a.split(" = ")) & set(b.split(" = ")) - {"none", "borderline"})


def by_style(rows: list[dict]) -> list[dict]:
    """Per model and name the rule gives (solved runs with all three names): how many runs keep it
    under mean ablation, under resample ablation and under both, and how many are named there by
    a name sharing a construction with it (alone or in a tie: the styles agree on it, if not on
    whether it is tied)."""
    counts: dict[tuple[str, str], Counter] = {}
    for r in rows:
        if r["steps_to_target"] is None or not _has_all_styles(r):
            continue
        c = counts.setdefault((r["kind"], r["mechanism"]), Counter())
        mean, resample = (r["name_mean_ablation"] == r["mechanism"],
                          r["name_resample_ablation"] == r["mechanism"])
        c.update(runs=1, mean=int(mean), resample=int(resample), both=int(mean and resample),
                 held_mean=int(shares(r["mechanism"], r["name_mean_ablation"])),
                 held_resample=int(shares(r["mechanism"], r["name_resample_ablation"])))
    return [{"model": kind, "name by the rule": name, "runs": c["runs"],
             "same under mean ablation": c["mean"], "same under resample ablation": c["resample"],
             "same under both": c["both"],
             "shares a construction with it under mean / resample ablation":
             f"{c['held_mean']} / {c['held_resample']}"}
            for (kind, name), c in sorted(counts.items(), key=lambda kv: (kv[0][0], -kv[1]["runs"]))]


#: The figure's width (inches) and its smallest type (points). The pages show it at 696 to 966 px
#: wide (the docs at 800 and 1400 px screens) and the README at up to about 880: type of FONT_PT
#: points on a figure WIDTH_IN inches wide is FONT_PT / 72 * shown / WIDTH_IN px high, 9.5 px or
#: more at 696 px shown (at the old 15.6 inches and 7 points it was 4.3 px).
WIDTH_IN, FONT_PT = 9.6, 9.5


def plot(rows: list[dict], summary: list[dict], path: Path) -> None:
    """Top left: every tested construction of every solved run, rows exact against loss recovered
    (the rule's thresholds dashed). Top right: mechanism counts per configuration (a tie hatched in
    its first member's colour). One legend under both: their colours are the same. Bottom: how the
    names under the three ablation styles agree, per configuration."""
    from matplotlib.patches import Patch

    from invperm_interp.analysis.mechanism import FAITHFUL_RECOVERED, FAITHFUL_ROWS

    names = sorted({t["name"] for r in rows for t in r["tested"]})
    mechs = sorted({r["mechanism"] for r in rows})
    # one colour per construction in both panels; grey is kept for 'none'
    palette = [f"C{i}" for i in range(10) if i != 7] + ["k", "#8c6d31", "#637939"]
    color = ({name: palette[i % len(palette)] for i, name in enumerate(names)}
             | {"none": "0.75", "borderline": "0.45"})
    keys = names + [m for m in mechs if m not in names]  # constructions, then ties and the rest
    # a tie's two names on two lines, so that two columns fit the width
    lines = sum(1 + (" = " in k) for k in keys)
    legend_rows = -(-lines // 2) + 1  # and the title
    with plt.rc_context({"font.size": FONT_PT, "axes.titlesize": FONT_PT + 1,
                         "axes.labelsize": FONT_PT, "xtick.labelsize": FONT_PT,
                         "ytick.labelsize": FONT_PT, "legend.fontsize": FONT_PT}):
        key_in = 0.18 * legend_rows  # the legend's height, inches
        fig = plt.figure(figsize=(WIDTH_IN, 6.6 + key_in))
        grid = fig.add_gridspec(3, 2, height_ratios=(3.4, key_in, 2.7), width_ratios=(1, 1.1))
        left, right = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
        key, styles = fig.add_subplot(grid[1, :]), fig.add_subplot(grid[2, :])
        for name in names:
            pts = [(t["loss_recovered"], 1 - t["rows_exact"]) for r in rows for t in r["tested"]
                   if t["name"] == name and t["loss_recovered"] is not None
                   and r["steps_to_target"] is not None]
            if pts:
                left.scatter(*zip(*pts), s=12, alpha=0.6, color=color[name])
        left.axvline(FAITHFUL_RECOVERED, color="k", linestyle="--", linewidth=0.8)
        left.axhline(1 - FAITHFUL_ROWS, color="k", linestyle="--", linewidth=0.8)
        left.set_yscale("symlog", linthresh=1e-3)
        left.set_ylim(0, 1.3)
        left.set_xlim(-2.2, 1.05)
        left.set_xlabel("loss recovered by its cells alone")
        left.set_ylabel("rows not exact")
        left.set_title("each construction on each solved run\n(dashed: the rule's thresholds)")
        labels = [f"{s['model'][:5]} d={s['d']}" for s in summary]
        bottom = [0] * len(summary)
        for mech in mechs:
            heights = [sum(1 for r in rows if r["kind"] == s["model"] and r["d"] == s["d"]
                           and r["steps_to_target"] is not None and r["mechanism"] == mech)
                       for s in summary]
            first = mech.split(" = ")[0]  # a tie: its first member's colour, hatched
            right.bar(labels, heights, bottom=bottom, color=color.get(first, "k"),
                      hatch="///" if " = " in mech else None,
                      edgecolor="white" if " = " in mech else None, linewidth=0)
            bottom = [b + h for b, h in zip(bottom, heights)]
        right.set_ylim(0, max(bottom, default=0) * 1.08 + 1)  # the tallest bar clear of the frame
        right.set_ylabel("solved runs")
        right.set_title("mechanism by the rule,\nper configuration")
        right.tick_params(axis="x", labelrotation=45)
        for label in right.get_xticklabels():
            label.set_horizontalalignment("right")
            label.set_rotation_mode("anchor")
        key.axis("off")
        key.legend(handles=[Patch(facecolor=color.get(k.split(" = ")[0], "k"),
                                  label=k.replace(" = ", " =\n"),
                                  hatch="///" if " = " in k else None,
                                  edgecolor="white" if " = " in k else None) for k in keys],
                   loc="center", ncol=2, frameon=False, handlelength=1.4, columnspacing=1.2,
                   title="construction (dots and bars; hatched: a tie of two)",
                   title_fontsize=FONT_PT)
        solved = [r for r in rows if r["steps_to_target"] is not None and _has_all_styles(r)]
        bottom = [0] * len(summary)
        for group, shade in AGREEMENT.items():
            heights = [sum(1 for r in solved if r["kind"] == s["model"] and r["d"] == s["d"]
                           and agreement(r) == group) for s in summary]
            styles.bar(labels, heights, bottom=bottom, label=group, color=shade, width=0.6)
            bottom = [b + h for b, h in zip(bottom, heights)]
        styles.set_ylim(0, max(bottom, default=0) * 1.45 + 1)  # room for the legend inside
        styles.set_ylabel("solved runs")
        styles.set_title("the name under zero (the rule's), mean and resample ablation of the "
                         "cells outside the circuit")
        styles.legend(loc="upper left", ncol=2, frameon=False, handlelength=1.4)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        with matplotlib.rc_context({"svg.hashsalt": "invperm"}):  # no date, the same ids every time
            fig.savefig(path.with_suffix(".svg"), metadata={"Date": None})
        plt.close(fig)


def write_census(rows: list[dict], planned: dict[tuple[str, int], int], folder: Path) -> list[Path]:
    """``census.{json,md,png,svg}`` in ``folder``."""
    from invperm_interp.analysis.mechanism import FAITHFUL_RECOVERED, FAITHFUL_ROWS, SCREEN_SAMPLES
    from invperm_interp.analysis.minimal import MAX_EVALUATIONS, SEARCH_SAMPLES

    folder.mkdir(parents=True, exist_ok=True)
    summary, table = summarize(rows, planned), sensitivity(rows, planned)
    samples = sorted({r["samples"] for r in rows}) or ["-"]
    paths = [folder / f"census.{ext}" for ext in ("json", "md", "png", "svg")]
    styles, tied, apart = by_style(rows), ties(rows), distinguishability()
    recount = guarded_recount(rows)
    paths[0].write_text(json.dumps({"summary": summary, "sensitivity": table, "by_style": styles,
                                    "ties": tied, "distinguishability": apart,
                                    "guarded_recount": recount, "runs": rows}, indent=1) + "\n")
    per_run = ["run", "steps_to_target", "final_mse", "mechanism", "also_faithful",
               "circuit_rows_exact", "loss_recovered", "names_by_batch", "name_mean_ablation",
               "name_resample_ablation",
               "minimal_size", "minimal_faithful", "minimal_optimal"]

    def table_lines(items: list[dict]) -> list[str]:
        cols = list(items[0]) if items else []
        return (["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
                + ["| " + " | ".join(cell(s[c]) for c in cols) + " |" for s in items])

    def cell(value) -> str:
        if value is None:
            return "-"
        return ", ".join(map(str, value)) if isinstance(value, list) else fmt(value)

    pairs = Counter((r["kind"], r["mechanism"], r.get("name_mean_ablation", "-"),
                     r.get("name_resample_ablation", "-")) for r in rows
                    if r["steps_to_target"] is not None and {r.get("name_mean_ablation"),
                    r.get("name_resample_ablation")} - {None, r["mechanism"]})
    ablation = [{"model": k, "zero ablation (the rule)": z, "mean ablation": m,
                 "resample ablation": x, "runs": n} for (k, z, m, x), n in pairs.most_common()]
    lines = [
        "# Census: what training learns, counted over seeds", "",
        "Adam lr 1e-2, N(0, 0.01²) init, batch 128, stopped at the first evaluation (every 100 "
        "steps, 1,024 held-out samples) with MSE < 1e-3 or at the step limit; each finished run "
        f"analysed on {', '.join(map(str, samples))} fresh samples (each construction screened on "
        "the first 512 and measured on all of them where an interval straddles a threshold, "
        "`mechanism.SCREEN_SAMPLES`). **mechanism**: the library's "
        "rule (`analysis.mechanism`): a working registry construction whose cells alone, with its "
        "signs at the model's own fitted per-cell β in the gauge-fixed weights and its read-out "
        f"block of W_U, get at least {FAITHFUL_ROWS:.0%} of rows exact and recover at least "
        f"{FAITHFUL_RECOVERED:.0%} of the loss (baseline: 0.5 everywhere, MSE d/4), both 95% "
        "intervals above the thresholds; among several, the one recovering the most loss "
        "(the others: *also_faithful*), named together with those whose loss-recovered intervals "
        "overlap its own (a tie, `a = b`: counted below); "
        "**borderline** when an interval straddles a threshold; "
        "'none' otherwise. Intervals are binomial/delta-method over samples; shares over seeds "
        "carry Wilson 95% intervals. **same name on 3 batches**: the rule on two more fresh "
        "batches of the same size names the same; **mean ablation**: the rule with removed cells' "
        "score contributions replaced by their mean instead of zero; **resample ablation**: by "
        "their value on another input (each sample paired with its own reference sample). "
        "**named circuit removed**: the median loss the model recovers with the circuit each style "
        f"names removed in that style (completeness), over the runs that style names (the first "
        f"{SCREEN_SAMPLES} samples, or all of them where an interval straddled a threshold there). "
        "**minimal circuit**: the "
        "fewest cells found whose circuit-only model is faithful; *optimal* when the exact search "
        f"(every smaller set, on {SEARCH_SAMPLES} samples, within {MAX_EVALUATIONS:,} sets) proved "
        "no smaller set is. Produced by `make census` (the grid analyses/grids/census.toml run by "
        "`invperm sweep`, then analyses/census_report.py); runs not yet trained are not counted: "
        "*runs* / *planned* says how far the census got.", "",
        *table_lines(summary), "",
        "## How the counts move with the thresholds", "",
        "The same recorded tests recounted by the same rule at other thresholds (solved runs).", "",
        *table_lines(table), "",
        "## Each name under the other ablation styles", "",
        "Solved runs by the name the rule gives them, and how many keep that name when the cells "
        "outside the circuit are mean-ablated or resample-ablated instead of zeroed.", "",
        *table_lines(styles), "",
        "## Ties: what each style can tell apart", "",
        "Mean and resample ablation (and scrubbing) replace a removed cell's score contribution "
        "by its value on other inputs; where the cell's query and key blocks are both the input's "
        "position blocks (`pos.P`, `pos.Y`, `pos.S`) that value is the same on every input, so the "
        "style keeps the cell exactly, in the claim or not. Derived from the registry's cells "
        "(`analysis.ties`), the registered constructions each style cannot tell apart by cells:", "",
        *table_lines(apart), "",
        "Beyond these, two constructions tie when their loss-recovered intervals overlap: the "
        "rule then names the set of them (`theorem3_two_block = theorem3_two_block_mass`), not "
        "one by its tie-break. Recounted from the recorded intervals under each style (under mean "
        "and resample ablation from the tests the sweep keeps beside each name; runs whose record "
        "lacks them are left out):", "",
        *table_lines(tied), "",
        "## What the guarded forms add", "",
        "The causal-scratch runs recounted from the same recorded tests with the two guarded "
        "superposed forms (found in this census's unnamed runs: assets/discovery.md) and with "
        "them left out, under each style:", "",
        *(table_lines(recount) if recount else ["No causal-scratch run was analysed."]), "",
        "## Where the ablation styles disagree", "",
        "Solved runs whose name under mean ablation (each removed cell's score contribution "
        "replaced by its mean over 1,024 reference samples) or under resample ablation (by its "
        "value on another input, one per sample) differs from the rule's (zeroed in the "
        "gauge-fixed frame).", "",
        *(table_lines(ablation) if ablation else ["None."]), "",
        "## Every run", "", *table_lines([{c: r.get(c) for c in per_run} for r in rows])]
    paths[1].write_text("\n".join(lines) + "\n")
    plot(rows, summary, paths[2])
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", help="the census sweep folder (holds sweep.jsonl), or a census.json "
                        "with --from-json")
    parser.add_argument("--from-json", action="store_true",
                        help="read the rows from a census.json this script wrote")
    parser.add_argument("--update-assets", action="store_true",
                        help="write into the checkout's assets/ instead of next to the runs")
    args = parser.parse_args(argv)
    try:
        out = report_folder(Path(args.runs), args.from_json, args.update_assets)
        rows, planned = (rows_from_json(Path(args.runs)) if args.from_json
                         else census_rows(Path(args.runs)))
    except ValueError as err:
        print(f"census_report: error: {err}", file=sys.stderr)
        return 2
    paths = write_census(rows, planned, out)
    print("wrote " + ", ".join(map(str, paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
