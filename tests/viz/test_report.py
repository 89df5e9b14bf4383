"""The HTML report: what a reader needs is on the page, said once, with one layer numbering."""

import html as html_lib
import json
import re
import xml.dom.minidom

import numpy as np
import pytest
import torch
from helpers import analysed, loads_from_network, svg_doc, svg_polylines, svg_texts

from invperm_interp import HookedDisentangledTransformer, Layout, ModelConfig, sample_batch
from invperm_interp.analysis.record import ModelAnalysis, analyze, headline
from invperm_interp.cli import main
from invperm_interp.config import TrainConfig
from invperm_interp.labels import excess_text
from invperm_interp.maths import constructions
from invperm_interp.runs.evaluation import Evaluation
from invperm_interp.viz.curves import accuracy_chart, training_chart
from invperm_interp.viz.heatmaps import plot_patching
from invperm_interp.viz.page import BUNDLE, write_bundle
from invperm_interp.viz.report import ReportContext, report_html
from invperm_interp.viz.weight_maps import certificate_map, head_maps, unembed_map


def _metrics(floor: float, last: float) -> list[Evaluation]:
    return [Evaluation(s, m, 0.75, 0.625, 0.125, train_mse=m, causal_floor=floor)
            for s, m in ((0, 5.0), (100, 2.6), (200, last))]


@pytest.fixture(scope="module")
def theorem3():
    model = constructions.build("theorem3", 3)
    batch = sample_batch(model.cfg.layout, 64, torch.Generator().manual_seed(0), dtype=torch.float64)
    return model, batch, analyze(model, batch, "construction theorem3")


@pytest.fixture(scope="module")
def theorem3_page(theorem3):
    model, batch, summary = theorem3
    context = ReportContext("construction theorem3", _metrics(0.0, 1e-4),
                            TrainConfig(steps=200, seed=7, batch_size=256, eval_size=512))
    return report_html(model, summary, batch, context)


def _sections(page: str) -> dict[str, str]:
    """Visible text of each <h2> section (tags, scripts and styles removed)."""
    page = re.sub(r"<(script|style)\b.*?</\1>", "", page, flags=re.S)
    parts = re.split(r"<h2>(.*?)</h2>", page)
    inline = re.compile(r"</?(?:b|code|i|span)\b[^>]*>")
    return {parts[i]: " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", inline.sub("", parts[i + 1])))
                               .split()) for i in range(1, len(parts), 2)}


def test_report_has_every_section_in_reading_order(theorem3_page):
    assert list(_sections(theorem3_page)) == [
        "Headline", "Results", "Training", "Mechanism", "Circuit",
        "Closest constructions by attention patterns", "Ablations",
        "Lemma 1 certificate", "Attention on one sample"]
    assert "Every dependence of a read-out row on a later input row is exactly 0" in theorem3_page
    assert not loads_from_network(theorem3_page)


def test_a_sweeps_verdict_is_shown_after_the_mechanism_when_the_run_has_one(theorem3):
    model, batch, summary = theorem3
    record = analysed("theorem3_superposed", also=["theorem3_superposed_complement"],
                      names=["theorem3_superposed", "borderline", "theorem3_superposed"],
                      resample="none", optimal=False)
    page = report_html(model, summary, batch, ReportContext(sweep_record=record))
    mechanism = _sections(page)["Mechanism"]
    said = mechanism[mechanism.index("The sweep's verdict"):]
    assert "the rule names theorem3_superposed (also faithful: theorem3_superposed_complement) " \
           "on 4,096 fresh samples (seed 12345)" in said
    assert "on 3 batches: theorem3_superposed, borderline, theorem3_superposed" in said
    assert "under mean ablation of the cells outside the circuit: theorem3_superposed" in said
    assert "under resample ablation of the cells outside the circuit: none" in said
    assert "minimal circuit 2 cells (faithful)" in said
    assert "The sweep's verdict" not in report_html(model, summary, batch)


def test_headline_names_the_mechanism_of_a_construction(theorem3_page):
    head = _sections(theorem3_page)["Headline"]
    assert "Mechanism: theorem3" in head and "none of the registry" not in head
    # at beta 100 its -1 guard is not needed: the minimal circuit is the two lookups
    assert "100.0% of rows exact" in head and "smallest faithful circuit found has 2 cells" in head
    assert "stays faithful without layer 1 (blocks.0): -1 at (pos.S, pos.Y)" in head  # not needed here


def _random_page(attention_dir: str):
    """The report of a random d = 4 model (init scale 1), where no construction explains or passes,
    and its analysis."""
    cfg = ModelConfig(Layout.plain(4), attention_dir=attention_dir, readout="P", init_scale=1.0)
    model = HookedDisentangledTransformer(cfg, seed=0)
    batch = sample_batch(cfg.layout, 32, torch.Generator().manual_seed(0))
    summary = analyze(model, batch, "random")
    return report_html(model, summary, batch), summary


def test_headline_says_when_no_template_explains_the_circuit():
    page, _ = _random_page("causal")
    head = _sections(page)["Headline"]
    assert "No registry construction explains this model" in head
    assert "No template explains the weights" in head and "unexplained" in head


def test_run_details_are_said_once(theorem3_page):
    sections = _sections(theorem3_page)
    meta = theorem3_page.split("<h2>")[0]
    for detail in ("200 steps", "lr 0.01", "batch size 256", "seed 7", "fixed batch of 512"):
        assert detail in meta, detail
    assert theorem3_page.count("construction theorem3") == 2  # <title> and <h1> only
    assert "construction theorem3" not in "".join(sections.values())


def test_results_show_excess_over_floor_and_accuracies(theorem3):
    model, batch, summary = theorem3
    page = report_html(model, summary, batch, ReportContext(metrics=_metrics(2.5, 2.5025)))
    results = _sections(page)["Results"]
    assert "2.5025 = floor 2.5 + 0.0025" in results  # the run's last eval, with enough digits
    assert excess_text(2.49, 2.5) == "2.49 = floor 2.5 − 0.01"
    assert "62.50%" in results and "12.50%" in results  # the run's row and sample accuracy
    assert "fresh batch" in results and "differ" in results  # why the two MSEs differ


def _polylines(drawing) -> list[list[tuple[float, float]]]:
    return [points for _, points in svg_polylines(svg_doc(drawing))]


def _svg_text(drawing) -> str:
    return "\n".join(text for text, _, _ in svg_texts(svg_doc(drawing)))


def test_causal_curve_is_drawn_as_excess_over_the_floor():
    metrics = _metrics(2.5, 2.5025)
    chart = training_chart(metrics, causal=True)
    curve, floor = next(c for c in _polylines(chart) if len(c) == 3), next(
        c for c in _polylines(chart) if len(c) == 2 and c[0][1] == c[1][1])
    # the excesses 2.5025 − 2.5 and 2.6 − 2.5 above the floor line, on matplotlib's symlog
    import matplotlib.scale as mscale

    t = mscale.SymmetricalLogTransform(10, 1e-4, 1).transform(np.array([0.0, 0.0025, 0.1]))
    assert (floor[0][1] - curve[2][1]) / (floor[0][1] - curve[1][1]) == pytest.approx(
        (t[1] - t[0]) / (t[2] - t[0]), rel=1e-3)
    assert "eval MSE − causal floor" in _svg_text(chart)
    accuracy = accuracy_chart(metrics)
    lines = [c for c in _polylines(accuracy) if len(c) == 3]
    assert len(lines) == 3 and len({c[-1][1] for c in lines}) == 3  # 0.75, 0.625, 0.125 apart
    heights = sorted(c[-1][1] for c in lines)  # SVG y grows downward: 0.75 highest
    assert (heights[1] - heights[0]) / (heights[2] - heights[0]) == pytest.approx(0.125 / 0.625)
    assert {"entries exact", "rows exact", "samples exact (whole Y)"} <= set(
        _svg_text(accuracy).splitlines())


def test_the_report_figures_are_svg_drawn_without_matplotlib(theorem3_page):
    from urllib.parse import unquote

    svgs = [unquote(s) for s in re.findall(r'src="data:image/svg\+xml;charset=utf-8,([^"]*)"',
                                           theorem3_page)]
    assert len(svgs) == 8 and not any("Matplotlib" in s for s in svgs)
    for svg in svgs:
        xml.dom.minidom.parseString(svg)  # well-formed XML


def test_weights_once_each_with_alt_text(theorem3_page):
    images = re.findall(r"<img [^>]*>", theorem3_page)
    alts = [re.search(r'alt="([^"]*)"', img).group(1) for img in images]
    assert len(images) == 8 and all(alts)  # curve, accuracy, 2 gauge-fixed, W_U, 2 raw, Lemma 1
    assert sum("W_U" in a for a in alts) == 1
    assert all('width="' in img for img in images)  # drawn at the size shown



def test_every_weight_heatmap_has_a_visible_caption_naming_its_matrix(theorem3_page):
    figures = re.findall(r"<figure[^>]*><img [^>]*alt=\"Heatmap of ([^\"]*)\"[^>]*>(.*?)</figure>",
                         theorem3_page, re.S)
    figures = [(alt, rest) for alt, rest in figures if " A of " in alt or alt.startswith("W_U")]
    assert len(figures) == 5, [alt for alt, _ in figures]  # 2 gauge-fixed A, W_U, 2 raw A
    for alt, rest in figures:
        caption = re.fullmatch(r"<figcaption>(.*)</figcaption>", rest.strip(), re.S)
        assert caption, alt
        matrix = "W_U" if alt.startswith("W_U") else ("raw" if "raw" in alt else "gauge-fixed")
        assert matrix in caption.group(1), (alt, caption.group(1))


def test_tables_have_captions_and_ablations_state_the_baseline_once(theorem3_page):
    tables = re.findall(r"<div class='table'>(.*?)<table", theorem3_page, re.S)
    assert len(tables) == 7 and all('<p class="caption">' in t for t in tables)  # each says what it shows
    ablations = theorem3_page.split("<h2>Ablations</h2>")[1].split("<h2>")[0]
    assert "MSE before" not in ablations and "causal floor</th>" not in ablations
    assert "Before any ablation the MSE is" in ablations


LAYER_WORD = re.compile(r"\b[Ll]ayer\s+(\d+)(\s*\(blocks\.(\d+)\))?")
BARE_INDEX = re.compile(r"(?<!\()\bblocks\.\d+(?!\.hook_)|\bh\^\d|\bresid_(?:pre|post) \d|\bLayer \d")


def _check_naming(text: str, n_layers: int, where: str) -> int:
    """Every layer mention in ``text`` is ``layer l (blocks.l-1)``; returns how many there were."""
    assert not BARE_INDEX.findall(text), f"{where}: {BARE_INDEX.findall(text)}"
    found = LAYER_WORD.findall(text)
    for number, with_index, index in found:
        assert with_index, f"{where}: 'layer {number}' without its module index"
        assert int(index) == int(number) - 1 and 1 <= int(number) <= n_layers, (where, number, index)
    return len(found)


def _figure_text(fig) -> str:
    texts = [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]
    return "\n".join(texts)


def test_each_layer_is_named_the_same_way_in_every_section(theorem3, theorem3_page):
    from invperm_interp.analysis import mse_to, patch_blocks
    from invperm_interp.maths.floors import dependency_map

    model, batch, _ = theorem3
    mentions = {where: _check_naming(text, 2, where) for where, text in _sections(theorem3_page).items()}
    for section in ("Circuit", "Ablations", "Attention on one sample"):
        assert mentions[section] > 0, section  # these sections name layers, and name them so
    deps = dependency_map(model, batch.X[:2])
    other = sample_batch(model.cfg.layout, 64, torch.Generator().manual_seed(1), dtype=torch.float64)
    patching = patch_blocks(model, batch.X, other.X, mse_to(batch.Y), normalize=True)
    figures = {"A": _svg_text(head_maps(model, 1, 0)[0]), "W_U": _svg_text(unembed_map(model)),
               "Lemma 1": _svg_text(certificate_map(deps.norms, deps.positions, model.cfg.layout)),
               "patching": _figure_text(plot_patching(patching).figure)}
    for where, text in figures.items():
        _check_naming(text, 2, where)
    assert "layer 2 (blocks.1)" in figures["A"]
    assert "layer 1 (blocks.0) input" in figures["patching"]


def test_a_shared_bundle_replaces_the_inline_copy(theorem3, tmp_path):
    model, batch, summary = theorem3
    inline = report_html(model, summary, batch)
    shared = report_html(model, summary, batch, ReportContext(
        bundle="../circuitsvis.js", links=(("↑ all runs", "../index.html"),)))
    assert '<nav><a href="../index.html">↑ all runs</a></nav>' in shared
    assert '"../circuitsvis.js"' in shared and "var CircuitsVis" not in shared
    assert len(inline) - len(shared) > 0.9 * BUNDLE.stat().st_size
    path = write_bundle(tmp_path)
    assert path.read_bytes() == BUNDLE.read_bytes()


def test_cli_report_on_a_construction(tmp_path, capsys):
    assert main(["report", "--construction", "two_block", "--d", "3", "--n", "32",
                 "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "analysis.json").read_text())
    assert data["mse"] < 1e-6 and data["causal_floor"] == 0.75
    assert (tmp_path / "report.html").stat().st_size > 100_000  # the inlined bundle
    assert "I at (pos.Y, pos.P)" in capsys.readouterr().out
    record = ModelAnalysis.from_json((tmp_path / "analysis.json").read_text())
    assert record.mechanism.name == "two_block" and record.minimal.size == 2


def test_analyze_headline_names_the_construction_cells(theorem3):
    _, _, summary = theorem3
    for _layer, _head, query, key, template in constructions.REGISTRY["theorem3"].cells:
        assert f"{template} at ({query}, {key})" in headline(summary)


def test_analyze_text_names_streams_by_layer_as_the_report_does(theorem3):
    """The ablation lines of the command line's text speak of "layer 2 (blocks.1) output", not of
    the note's h^2, as every section of the report does."""
    _, _, summary = theorem3
    text = headline(summary)
    ablations = text.split("\nablations\n")[1].split("\n\n")[0]
    assert "h^" not in ablations
    assert "layer 2 (blocks.1) output, read out" in ablations


def test_a_solved_model_gets_a_solved_headline_that_says_so(theorem3_page):
    assert '<div class="headline solved">' in theorem3_page
    assert "The model solves the task" in _sections(theorem3_page)["Headline"]


def test_no_placeholder_text_when_nothing_is_fitted(theorem3):
    """No atoms at all and every layer unexplained: the headline says so in words, without
    'all 0 cells', a '100%–100%' range or a pointer to an empty table."""
    from dataclasses import replace

    from invperm_interp.analysis.mechanism import MinimalCircuit
    from invperm_interp.analysis.templates import Circuit
    from invperm_interp.viz.mechanism import headline, mechanism_section

    model, batch, summary = theorem3
    mech = summary.mechanism
    empty = MinimalCircuit((), (), False, mech.minimal.score, 0.0)
    nothing = replace(summary, mechanism=replace(mech, name=None, faithfulness=None, minimal=empty),
                      circuit=Circuit((), (1.0, 1.0)))
    head = headline(nothing)
    assert "all 0 cells" not in head and "100%–100%" not in head and "table below" not in head
    assert "occupy no cell" in head and "100% of every layer's gauge-fixed weights" in head
    assert "<tbody></tbody>" not in mechanism_section(nothing)
    assert "<tbody></tbody>" not in report_html(model, nothing, batch)


def test_mechanism_table_shows_every_condition_of_the_rule(theorem3):
    """Rows, loss and template signs each get a column, and a construction that passes rows and loss
    with a wrongly signed template is not the one named."""
    from dataclasses import replace

    from invperm_interp.viz.mechanism import headline, mechanism_section

    _, _, summary = theorem3
    mech = summary.mechanism
    named = mech.faithfulness
    flipped = replace(named, hypothesis="theorem3_flipped",
                      template_betas=(-max(abs(b) for b in named.template_betas),)
                      + tuple(named.template_betas[1:]))  # a sign that matters (verdict.py)
    section = mechanism_section(replace(summary, mechanism=replace(mech, tested=(named, flipped))))
    header = re.search(r"<thead>(.*?)</thead>", section).group(1)
    assert all(h in header for h in ("rows exact alone (≥ 99%)", "loss recovered (≥ 80%)",
                                     "template signs", "rule"))
    rows = {r[0]: r for r in (re.findall(r"<td[^>]*>(.*?)</td>", tr)
                              for tr in re.findall(r"<tr>(.*?)</tr>", section.split("<tbody>")[1]
                                                     .split("</tbody>")[0]))}
    assert rows["theorem3"][4] == "all β &gt; 0 ✓" and rows["theorem3"][-1] == "named"
    assert rows["theorem3_flipped"][4].endswith("β ≤ 0 ✗") and rows["theorem3_flipped"][-1] == "fails"
    none = replace(summary, mechanism=replace(mech, name=None, faithfulness=None, tested=(flipped,)))
    assert "templates fitted with β ≤ 0" in headline(none)  # the headline says which condition fails


def test_training_caption_matches_what_is_drawn():
    from invperm_interp.viz.curves import training_caption

    assert "excess over the causal floor" in training_caption(_metrics(2.5, 2.5025), causal=True)
    scratch = training_caption(_metrics(0.0, 1e-4), causal=True)  # causal, floor 0: the MSE itself
    assert "excess" not in scratch and "floor is 0" in scratch
    assert "causal twin" in training_caption(_metrics(2.5, 1e-4), causal=False)


def test_cli_headline_writes_the_causal_mse_against_its_floor_and_names_its_batch(theorem3):
    from dataclasses import replace

    _, _, summary = theorem3
    assert summary.model.causal
    first = headline(replace(summary, mse=2.5039, causal_floor=2.5)).splitlines()[0]
    assert "MSE 2.5039 = floor 2.5 + 0.0039" in first and "on 64 fresh samples" in first


def test_an_unnamed_models_closest_construction_is_the_mechanism_tables_first_row():
    page, summary = _random_page("bidirectional")
    mechanism = page.split("<h2>Mechanism</h2>")[1].split("<h2>")[0]
    first_row = re.search(r"<tbody><tr><td>([^<]+)</td>", mechanism).group(1)
    tested = summary.mechanism.tested
    assert len(tested) >= 2 and first_row == tested[0].hypothesis
    assert (f"The closest (the most loss recovered, the first row of the Mechanism table), "
            f"{first_row}, run on its own") in _sections(page)["Headline"]
    ablations = page.split("<h2>Ablations</h2>")[1].split("<h2>")[0]
    assert "a change of +0 or below removed nothing it needs" in ablations


def test_the_minimal_circuit_table_is_in_layer_order(theorem3):
    """Whatever order the search found the cells in, the table lists them by layer, then head."""
    from dataclasses import replace

    from invperm_interp.analysis.hypothesis import Cell
    from invperm_interp.viz.mechanism import mechanism_section

    model, batch, summary = theorem3
    cells = (Cell(1, 0, "pos.P", "L1.x", "-1"), Cell(0, 0, "pos.Y", "pos.P", "I"),
             Cell(1, 0, "pos.P", "pos.Y", "I"))
    minimal = replace(summary.mechanism.minimal, cells=cells)
    section = mechanism_section(replace(summary, mechanism=replace(summary.mechanism,
                                                                    minimal=minimal)))
    table = section.split("<p class=\"caption\">Minimal circuit")[1].split("</table>")[0]
    layers = re.findall(r"<td>(layer \d)[^<]*</td>", table)
    assert layers == sorted(layers) and len(layers) == 3, layers
    assert table.index("-1 at (pos.P, L1.x)") < table.index("I at (pos.P, pos.Y)")  # kept in-layer
