"""analyses/dynamics.py: the committed dynamics.md is what its per-run rows make, and its two
timing columns are counted as their headers say, against the rows recomputed here."""

import json
import sys

import pytest
from helpers import REPO

DYNAMICS = json.loads((REPO / "assets" / "dynamics.json").read_text())


@pytest.fixture
def dynamics(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "analyses"))
    sys.modules.pop("dynamics", None)
    import dynamics

    return dynamics


def test_the_committed_dynamics_md_is_what_dynamics_json_makes(dynamics):
    assert dynamics.markdown(DYNAMICS["runs"], "dynamics") == (REPO / "assets" / "dynamics.md").read_text()
    assert dynamics.table(DYNAMICS["runs"]) == DYNAMICS["table"]


def test_beta_half_way_and_the_formation_spread_are_counted_from_the_runs():
    runs = [r for r in DYNAMICS["runs"] if r["mechanism"] == "two_block"]
    half = [r["drop"] - r["beta_half_lead"] for r in runs]
    after = sum(h >= r["leave"] for h, r in zip(half, runs))
    (row,) = [t for t in DYNAMICS["table"] if t["mechanism"] == "two_block"]
    assert row["β progress 0.5 at or after leaving"] == f"{after}/{len(runs)}"
    mass = [r for r in DYNAMICS["runs"] if r["mechanism"] == "theorem3_two_block_mass"]
    spreads = sorted(max(r["cells_formed"].values()) - min(r["cells_formed"].values()) for r in mass)
    (row,) = [t for t in DYNAMICS["table"] if t["mechanism"] == "theorem3_two_block_mass"]
    middle = len(spreads) // 2
    assert row["cells' formation spread (median)"] == (spreads[middle - 1] + spreads[middle]) / 2


def _curves(run: dict, top: float = 1.0) -> dict:
    """Made-up curves rising to ``top`` around the run's drop, with a checkpoint at each of its
    times (the committed rows hold no curves)."""
    drop = run["drop"]
    steps = sorted(set(range(0, drop + 400, 25)) | {run["faithful"] or 0})
    rise = [min(1.0, max(0.0, (s - drop + 300) / 300)) * top for s in steps]
    return {"steps": steps, "beta": rise, "circuit": rise, "eval_steps": steps,
            "eval_mse": [2.5 * (1 - 0.99 * r / top) for r in rise]}


def _hue_and_chroma(colour) -> tuple[float, float]:
    """CIELAB hue angle (degrees) and chroma of an sRGB colour (D65), from the standard formulas."""
    import math

    from matplotlib.colors import to_rgb

    rgb = [((v + 0.055) / 1.055) ** 2.4 if v > 0.04045 else v / 12.92 for v in to_rgb(colour)]
    xyz = [sum(m * v for m, v in zip(row, rgb)) for row in (
        (0.4124, 0.3576, 0.1805), (0.2126, 0.7152, 0.0722), (0.0193, 0.1192, 0.9505))]
    f = [t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116
         for t in (xyz[0] / 0.95047, xyz[1], xyz[2] / 1.08883)]
    a, b = 500 * (f[0] - f[1]), 200 * (f[1] - f[2])
    return math.degrees(math.atan2(b, a)) % 360, math.hypot(a, b)


def test_the_dynamics_figure_tells_each_panels_mechanisms_apart_and_draws_progress_past_1(dynamics):
    """The committed runs' mechanisms, each model's in its own panel: hues far apart (not red,
    brown and orange side by side), the unnamed runs grey; a progress above 1 (a circuit better at
    a checkpoint than at the end) is drawn where it is, against reference lines at 0 and 1."""
    runs = [{**r, "curves": _curves(r, 1.4 if i == 0 else 1.0)}
            for i, r in enumerate(DYNAMICS["runs"]) if r["drop"] is not None]
    fig = dynamics.figure(runs)
    kinds = [k for k in dynamics.KINDS if any(r["kind"] == k for r in runs)]
    for col, kind in enumerate(kinds):
        beta_ax = fig.axes[len(kinds) + col]  # row-major: MSE, β, circuit
        colours = {line.get_color() for line in beta_ax.get_lines() if line.get_linestyle() == "-"
                   and len(line.get_xdata()) > 2}
        hues = [_hue_and_chroma(c) for c in colours if c != dynamics.UNNAMED_COLOUR]
        mechanisms = {r["mechanism"] for r in runs if r["kind"] == kind}
        assert len(colours) == len(mechanisms), kind
        # matplotlib's red, brown and orange (C3, C5, C1) lie within 25° of hue of each other
        assert min(min(abs(x - y), 360 - abs(x - y)) for i, (x, _) in enumerate(hues)
                   for y, _ in hues[i + 1:]) >= 45, kind
        assert min(chroma for _, chroma in hues) > 30 > _hue_and_chroma(dynamics.UNNAMED_COLOUR)[1]
        assert ("none" in mechanisms) == (dynamics.UNNAMED_COLOUR in colours)
        assert {line.get_ydata()[0] for line in beta_ax.get_lines()
                if line.get_linestyle() == "--"} == {0.0, 1.0}
    assert fig.axes[2 * len(kinds)].get_ylim()[1] > 1.4  # the first run's circuit, not cut off


def test_a_mechanism_has_one_colour_in_every_panel_and_the_figure_one_legend(dynamics):
    """Colour is a function of the mechanism's name across the figure: a name drawn in both models'
    panels (made up here: the committed runs' named mechanisms each belong to one model) has the
    same colour in both, two names never share one, and one legend below the panels lists each
    name once; a progress past 1 is said in the figure, not only drawn."""
    committed = [r for r in DYNAMICS["runs"] if r["drop"] is not None]
    shared = "two_block"
    runs = [{**r, "curves": _curves(r, 1.4 if i == 0 else 1.0)} for i, r in enumerate(committed)]
    causal = next(i for i, r in enumerate(runs) if r["kind"] == "causal")
    runs[causal] = {**runs[causal], "mechanism": shared}  # one causal run named as the bidirectional
    colours = dynamics.mechanism_colours(runs)
    fig = dynamics.figure(runs)
    kinds = [k for k in dynamics.KINDS if any(r["kind"] == k for r in runs)]
    assert len(kinds) == 2
    per_panel = []
    for col, kind in enumerate(kinds):
        ax = fig.axes[2 * len(kinds) + col]  # the circuit row: one line per run, in run order
        lines = [line for line in ax.get_lines() if line.get_linestyle() == "-"
                 and len(line.get_xdata()) > 2]
        mine = [r for r in runs if r["kind"] == kind]
        assert len(lines) == len(mine)
        seen = {}
        for r, line in zip(mine, lines):
            seen.setdefault(r["mechanism"], set()).add(line.get_color())
            assert line.get_color() == colours[r["mechanism"]]
        assert all(len(c) == 1 for c in seen.values()), kind
        per_panel.append({n: c.pop() for n, c in seen.items()})
    assert per_panel[0][shared] == per_panel[1][shared]
    assert per_panel[0]["none"] == per_panel[1]["none"] == dynamics.UNNAMED_COLOUR
    named = {n: c for n, c in colours.items() if n not in dynamics.UNNAMED}
    assert len(set(named.values())) == len(named)  # two names never share a colour
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    entries = {t.get_text(): h.get_color() for t, h in zip(fig.legends[0].get_texts(),
                                                           fig.legends[0].legend_handles)}
    assert {n: entries[n] for n in colours} == colours
    assert [t.get_text() for t in fig.legends[0].get_texts()].count(shared) == 1
    texts = " ".join(t.get_text() for t in [*fig.texts, *fig.axes[2 * len(kinds)].texts])
    assert "above 1" in texts and "final weights (1)" in texts


def test_each_mechanisms_colour_keeps_its_hue(dynamics):
    """The palette's hue angles, which the colours are chosen by, are the colours' own."""
    for colour, hue in dynamics.NAMED_COLOURS.items():
        assert abs(_hue_and_chroma(colour)[0] - hue) < 1, colour


def test_the_fine_figure_has_the_same_colours_and_one_legend(dynamics, monkeypatch):
    """analyses/dynamics_fine.py's figure: the mechanism colours of the main figure, one legend
    below the panels (it had one per panel at 8 pt), its text at 10 pt."""
    sys.modules.pop("dynamics_fine", None)
    import dynamics_fine

    fine = json.loads((REPO / "assets" / "dynamics_fine.json").read_text())
    runs = [{**r, "curves": _curves(r)} for r in fine["runs"] if r["drop"] is not None]
    fig = dynamics_fine.figure(runs)
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    colours = dynamics.mechanism_colours(runs)
    entries = {t.get_text(): h.get_color() for t, h in zip(fig.legends[0].get_texts(),
                                                           fig.legends[0].legend_handles)}
    assert {n: entries[n] for n in colours} == colours
    assert min(t.get_fontsize() for t in fig.legends[0].get_texts()) >= 10


@pytest.mark.parametrize("name", ["dynamics", "dynamics_fine"])
def test_the_dynamics_figures_smallest_text_is_at_least_9_px_in_the_docs_column(dynamics, name):
    """Every text of the figure (ticks, labels, legend, notes) at the committed PNG's resolution,
    scaled to the docs' content column at an 800 px window (696 px, tests/docs/test_figures.py)."""
    from matplotlib.text import Text
    from PIL import Image

    from invperm_interp.viz.heatmaps import FIGURE_DPI

    sys.modules.pop(name, None)
    module = __import__(name)
    rows = json.loads((REPO / "assets" / f"{name}.json").read_text())["runs"]
    fig = module.figure([{**r, "curves": _curves(r)} for r in rows if r["drop"] is not None])
    fig.canvas.draw()
    smallest = min(t.get_fontsize() for t in fig.findobj(Text) if t.get_text().strip() and t.get_visible())
    width = Image.open(REPO / "assets" / f"{name}.png").size[0]
    assert smallest / 72 * FIGURE_DPI * min(1.0, 696 / width) >= 9, smallest
