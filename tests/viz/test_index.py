"""The index page of a directory of runs: every run once, linked, with what it reached."""

import html
import json
import re

import pytest
from helpers import analysed

from invperm_interp import Layout, ModelConfig
from invperm_interp.cli import main
from invperm_interp.config import TrainConfig
from invperm_interp.sweep.run_rows import find_runs, index_title
from invperm_interp.viz.index import write_index


def _fake_run(run_dir, d: int, seed: int, attention: str, mses: list[float], floor: float) -> dict:
    """A run directory as training leaves it (config and metrics; no weights needed here)."""
    model = ModelConfig(Layout.plain(d), attention_dir=attention, readout="P")
    train = TrainConfig(steps=100 * len(mses), seed=seed, out_dir=str(run_dir))
    config = {"model": model.to_dict(), "train": train.to_dict()}
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(config))
    lines = [json.dumps({"step": 100 * (i + 1), "mse": m, "row_acc": 1.0 if m < 1e-3 else 0.0,
                         "causal_floor": floor})
             for i, m in enumerate(mses)]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return config


def _rows(page: str, table: str = "<table class='sortable'>") -> list[list[str]]:
    """The cells of the page's ``table`` (by default the run table), tags stripped."""
    body = page.split(table)[1].split("<tbody>")[1].split("</tbody>")[0]
    return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", tr)]
            for tr in re.findall(r"<tr>(.*?)</tr>", body)]


def test_index_of_run_directories(tmp_path):
    _fake_run(tmp_path / "b_d4_s0", 4, 0, "bidirectional", [2.0, 5e-4, 1e-4], 1.0)
    _fake_run(tmp_path / "b_d4_s1", 4, 1, "bidirectional", [2.0, 0.5, 0.1], 1.0)
    _fake_run(tmp_path / "c_d4_s0", 4, 0, "causal", [2.0, 1.01, 1.001], 1.0)
    (tmp_path / "b_d4_s0" / "report.html").write_text("<html></html>")
    page = write_index(tmp_path, find_runs(tmp_path), index_title(tmp_path)).read_text()
    rows = {r[0].split()[0]: r for r in _rows(page)}
    assert set(rows) == {"b_d4_s0", "b_d4_s1", "c_d4_s0"}
    assert rows["b_d4_s0"][7] == "200"  # first eval step below 1e-3
    assert rows["b_d4_s1"][7] == "not solved"
    assert rows["c_d4_s0"][7] == "cannot: floor 1"  # a causal run at its floor is not "unsolved"
    assert rows["c_d4_s0"][5] == "1.001 = floor 1 + 0.001"
    assert '<a href="b_d4_s0/report.html">' in page and "(no report)" in rows["b_d4_s1"][0]
    assert page.count("<img ") == 1 and "sortable" in page and "addEventListener" in page


def test_a_standard_run_is_shown_with_the_disentangled_shape_it_is_read_in(tmp_path):
    for name, extra in (("att", {}), ("ln", {"layernorm": True, "d_mlp": 16})):
        model = ModelConfig(Layout.plain(4), attention_dir="bidirectional", arch="standard",
                            d_model=8, n_heads=2, **extra)
        (tmp_path / name).mkdir()
        config = {"model": model.to_dict(), "train": TrainConfig(steps=100, seed=0).to_dict()}
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        (tmp_path / name / "metrics.jsonl").write_text(json.dumps({"step": 100, "mse": 0.5}) + "\n")
    page = write_index(tmp_path, find_runs(tmp_path), index_title(tmp_path)).read_text()
    rows = {r[0].split()[0]: r for r in _rows(page)}
    # T = 8, so D_0 = 4 + 8 = 12, then each layer of 2 heads triples the width
    assert rows["att"][1] == ("bidirectional [P; Y] → P (standard, d_model 8, d_head 4; read as "
                              "disentangled, widths 12 → 36 → 108)")
    assert rows["ln"][1] == ("bidirectional [P; Y] → P (standard, d_model 8, d_head 4, LayerNorm, "
                             "MLP 16; no exact map)")


def test_index_reads_a_sweep_jsonl(tmp_path):
    """``invperm sweep``'s format: one line per run, its folder named by ``name``."""
    records = []
    for seed, solve, status in ((0, 300, "finished"), (1, None, "diverged")):
        config = _fake_run(tmp_path / f"run{seed}", 6, seed, "bidirectional", [1.0], 1.5)
        records.append({"name": f"run{seed}", "status": status, "step": 400, "steps_to_solve": solve,
                        "solve_mse": 1e-3, "final": {"step": 400, "mse": 2e-4, "row_acc": 1.0},
                        "mechanism": "two_block", **config})
    (tmp_path / "sweep.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    rows = find_runs(tmp_path)
    assert [(r.seed, r.steps_to_solve, r.mechanism, r.steps, r.status) for r in rows] == [
        (0, 300, "two_block", 400, None), (1, None, "two_block", 400, "diverged")]
    assert rows[0].dir == tmp_path / "run0"
    page = write_index(tmp_path, find_runs(tmp_path), index_title(tmp_path)).read_text()
    assert "diverged at step 400" in page
    assert "under mean or resample ablation" not in page  # no record of other styles: no note
    # the sweep's analysis names run0 otherwise under resample ablation: said beside its mechanism
    records[0]["analysis"] = analysed("two_block", resample="none").to_dict()
    (tmp_path / "sweep.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert find_runs(tmp_path)[0].other_styles == (("resample", "none"),)
    page = write_index(tmp_path, find_runs(tmp_path), index_title(tmp_path)).read_text()
    rows = {r[0].split()[0]: r for r in _rows(page)}
    assert rows["run0"][8] == "two_block (resample: none)" and rows["run1"][8] == "two_block"
    assert "the name the rule gives under mean or resample ablation" in page
    # a line without its record: the name comes from the run's mechanism.json, not the line's text
    (tmp_path / "run1" / "mechanism.json").write_text(json.dumps(analysed("appendix_b").to_dict()))
    assert find_runs(tmp_path)[1].mechanism == "appendix_b"
    (tmp_path / "sweep.jsonl").write_text('{"name": "x"}\n')
    with pytest.raises(ValueError, match="line 1 is not a run record"):
        find_runs(tmp_path)


def test_cli_report_on_a_directory(tmp_path, capsys):
    _fake_run(tmp_path / "a", 3, 0, "bidirectional", [1.0, 1e-4], 0.75)
    assert main(["report", str(tmp_path), "--index-only"]) == 0
    assert (tmp_path / "index.html").is_file() and "index.html" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty)]) == 2
    assert "holds no runs" in capsys.readouterr().err


def test_index_headline_states_the_result_and_the_figure_is_not_one_dot(tmp_path):
    """The demo's two runs at one d: the headline says which learns and which sits on its floor, and
    the figure is their training curves (steps to solve against d would be a single dot)."""
    _fake_run(tmp_path / "bidirectional", 10, 0, "bidirectional", [2.0, 6.4e-4], 2.5)
    _fake_run(tmp_path / "causal", 10, 0, "causal", [2.7, 2.503912], 2.5)
    page = write_index(tmp_path, find_runs(tmp_path), index_title(tmp_path)).read_text()
    head = re.sub(r"<[^>]+>", "", page.split("<h2>Headline</h2>")[1].split("</div>")[0])
    assert "bidirectional [P; Y] → P model learns the task: final MSE 0.00064" in head
    assert "causal [P; Y] → P model sits on its causal floor: 2.50391 = floor 2.5 + 0.00391" in head
    assert page.count("<img ") == 1 and 'alt="Eval MSE against step for every run' in page
    assert "steps-to-solve figure" not in page  # the figure drawn is the curves, the causal one in it


def test_reports_link_to_the_index_and_their_twin(tmp_path):
    from invperm_interp.viz.index import report_links

    _fake_run(tmp_path / "b_d4_s0", 4, 0, "bidirectional", [2.0, 1e-4], 1.0)
    _fake_run(tmp_path / "c_d4_s0", 4, 0, "causal", [2.0, 1.001], 1.0)
    _fake_run(tmp_path / "c_d4_s1", 4, 1, "causal", [2.0, 1.001], 1.0)
    rows = {r.dir.name: r for r in find_runs(tmp_path)}
    assert report_links(tmp_path, list(rows.values()), rows["b_d4_s0"]) == [
        ("↑ all runs", "../index.html")]  # the twin has no weights yet: no dead link
    (tmp_path / "c_d4_s0" / "final.safetensors").write_bytes(b"")
    assert report_links(tmp_path, list(rows.values()), rows["b_d4_s0"]) == [
        ("↑ all runs", "../index.html"), ("twin: the causal model", "../c_d4_s0/report.html")]
    assert report_links(tmp_path, list(rows.values()), rows["c_d4_s1"]) == [
        ("↑ all runs", "../index.html")]  # seed 1 has no bidirectional twin


def test_the_index_shows_and_links_the_sweep_report_once_it_exists(tmp_path):
    from invperm_interp.sweep.report import write_sweep_report

    records = []
    for seed in (0, 1):
        config = _fake_run(tmp_path / f"run{seed}", 6, seed, "bidirectional", [1.0, 5e-4], 1.5)
        records.append({"name": f"run{seed}", "status": "finished", "step": 200,
                        "steps_to_solve": 200, "solve_mse": 1e-3,
                        "final": {"step": 200, "mse": 5e-4, "row_acc": 1.0}, "mechanism": "two_block",
                        **config})
    (tmp_path / "sweep.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    page = write_index(tmp_path, find_runs(tmp_path), index_title(tmp_path)).read_text()
    assert "sweep_report" not in page  # no sweep report yet: nothing to show
    write_sweep_report(tmp_path)  # writes the figure, then the index again
    page = (tmp_path / "index.html").read_text()
    assert '<img src="sweep_report.png"' in page
    assert '<a href="sweep_report.md">' in page and '<a href="sweep_report.svg">' in page


def _meta(page: str) -> str:
    """The page's caption above the figure and tables (``<p class='meta'>``), tags stripped."""
    return html.unescape(re.sub(r"<[^>]+>", "", re.search(r"<p class='meta'>(.*?)</p>", page,
                                                           re.S).group(1)))


def test_the_caption_says_what_the_causal_excess_is_only_when_the_page_shows_one(tmp_path):
    """A causal run's MSE is written as floor + excess; the caption then says what the excess is
    (what training could still remove above the floor, moving with the training batches) and its
    largest share of the floor; with no such run shown it says nothing of it."""
    both = tmp_path / "both"
    _fake_run(both / "b", 10, 0, "bidirectional", [2.0, 6e-4], 2.5)
    _fake_run(both / "c", 10, 0, "causal", [2.5, 2.5005, 2.5025], 2.5)
    meta = _meta(write_index(both, find_runs(both)).read_text())
    assert "2.5025 = floor 2.5 + 0.0025" in "".join(r[5] for r in _rows(
        (both / "index.html").read_text()))
    assert "the excess is the rest, the part training could still remove" in meta
    assert "at most 0.1% of the floor" in meta  # 0.0025 / 2.5
    assert "can rise as well as fall" in meta and "below 0" not in meta
    below = tmp_path / "below"
    _fake_run(below / "c", 10, 0, "causal", [2.5, 2.499], 2.5)
    assert "below 0: the fixed eval batch's sampling noise" in _meta(
        write_index(below, find_runs(below)).read_text())
    for name, attention, floor in (("bidirectional", "bidirectional", 2.5), ("scratch", "causal", 0.0)):
        alone = tmp_path / name  # no causal run with a floor: no excess on the page, no remark
        _fake_run(alone / "r", 10, 0, attention, [2.0, 6e-4], floor)
        page = write_index(alone, find_runs(alone)).read_text()
        assert "floor +" not in "".join(r[5] for r in _rows(page))
        assert "excess" not in _meta(page), name
