"""analyses/census_standard_report.py puts a standard census beside the disentangled one: counts
per setting and heads, names with placements folded to constructions, and W_OV's effective rank."""

import json
from types import SimpleNamespace

import pytest
import torch
from helpers import REPO, analysed, analyses_script


@pytest.fixture
def report(monkeypatch):
    return analyses_script(monkeypatch, "census_standard_report")


def record(name, kind, heads, seed, mechanism, solved=True, mean=None):
    layout = ({"d": 4, "segments": [["P", "P", 4], ["Y", "Y", 4]]} if kind == "bidirectional" else
              {"d": 4, "segments": [["P", "P", 4], ["Y", "Y", 4], ["S", "S", 4]]})
    return {"name": name, "variant": kind, "status": "stopped", "step": 700,
            "steps_to_solve": 700 if solved else None, "solve_mse": 1e-3,
            "final": {"step": 700, "mse": 9e-4, "row_acc": 1.0}, "mechanism": mechanism,
            "model": {"layout": layout, "arch": "standard", "d_model": 16, "n_heads": heads,
                      "attention_dir": "bidirectional" if kind == "bidirectional" else "causal"},
            "train": {"seed": seed}, "analysis": analysed(mechanism, mean=mean).to_dict()}


def test_standard_runs_stand_beside_the_disentangled_census_at_their_d(tmp_path, report, monkeypatch):
    rows = [record("a", "bidirectional", 1, 0, "two_block"),
            record("b", "bidirectional", 2, 0, "two_block @ L1h0→L2h1", mean="theorem2 @ L1h0→L2h1"),
            record("c", "bidirectional", 2, 1, "none"),
            record("d", "scratch", 1, 0, "none", solved=False)]
    (tmp_path / "sweep.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for r in rows:
        (tmp_path / r["name"]).mkdir()
        (tmp_path / r["name"] / "final.safetensors").write_bytes(b"")
    # W_V W_O with singular values 3, 3 and 1 in every head: 18 of its squared norm 19 (95%) in
    # the first two, 9 (47%) in the first: effective rank 2
    W_V = torch.zeros(2, 16, 8)
    W_V[:, 0, 0], W_V[:, 1, 1], W_V[:, 2, 2] = 3.0, 3.0, 1.0
    W_O = torch.eye(8, 16).expand(2, 8, 16)
    blocks = [SimpleNamespace(attn=SimpleNamespace(W_Q=W_V, W_K=W_V, W_V=W_V, W_O=W_O))] * 2
    model = SimpleNamespace(blocks=blocks, cfg=SimpleNamespace(arch="standard"))
    monkeypatch.setattr(report.Run, "load", lambda path: SimpleNamespace(model=model))
    census = {"runs": [{"run": f"x{s}", "kind": "bidirectional", "d": d, "seed": s,
                        "steps_to_target": 500, "mechanism": "two_block",
                        "name_mean_ablation": "two_block", "name_resample_ablation": "theorem2"}
                       for d in (4, 6) for s in range(3)]}
    (tmp_path / "census.json").write_text(json.dumps(census))
    assert report.main([str(tmp_path), "--census", str(tmp_path / "census.json")]) == 0
    out = json.loads((tmp_path / "census_standard.json").read_text())
    summary = {(s["model"], s["architecture"]): s for s in out["summary"]}
    one, two = summary["bidirectional", "standard, 1 head"], summary["bidirectional", "standard, 2 heads"]
    assert one["named"].startswith("1 of 1 (") and one["W_OV effective rank"] == "2–2"
    size = len(analysed("two_block").mechanism.minimal.cells)
    assert one["minimal circuit faithful"].startswith("1 of 1 (") and one["its cells"] == str(size)
    assert summary["bidirectional", "disentangled (census)"]["its cells"] is None  # none recorded
    unnamed = {(n["model"], n["architecture"]): n for n in out["unnamed"]}
    c = unnamed["bidirectional", "standard, 2 heads"]  # run c: none, its minimal circuit a test's cells
    assert (c["none"], c["faithful minimal circuit"], c["inside a construction's cells"]) == (1, 1, 1)
    assert list(c["constructions"]) == [analysed("none").mechanism.tested[0].hypothesis]
    assert two["names"] == {"two_block": 1, "none": 1}
    assert two["same under mean"] == "1 of 2"  # c keeps "none"; b's construction differs
    beside = summary["bidirectional", "disentangled (census)"]
    assert beside["runs"] == 3 and beside["d"] == 4  # only the sweep's d
    assert beside["same under mean"] == "3 of 3" and beside["same under resample"] == "0 of 3"
    scratch = summary["scratch", "standard, 1 head"]
    assert scratch["solved"].startswith("0 of 1 (") and scratch["named"].startswith("0 of 0")
    text = (tmp_path / "census_standard.md").read_text()
    assert "| bidirectional | 4 | standard, 2 heads | 2 | 2 | 2 of 2 (" in text
    assert (tmp_path / "census_standard.png").stat().st_size > 1000


def test_a_folder_without_sweep_jsonl_is_one_line(tmp_path, report, capsys):
    assert report.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sweep.jsonl" in err[0]


def test_a_tie_of_one_constructions_placements_is_that_construction(report):
    assert report.construction_of("two_block @ L1h1→L2h0 = two_block @ L1(h0+h1)→L2h0") == "two_block"
    assert report.construction_of("a @ L1h0→L2h0 = b @ L1h1→L2h0") == "a = b"
    assert report.construction_of("none") == "none" and report.construction_of(None) is None


def test_the_committed_report_is_what_its_json_and_the_committed_census_make(tmp_path, report):
    """assets/census_standard.md is regenerated from its own JSON's standard rows and the committed
    disentangled census, so a re-run census updates it without the standard runs."""
    committed = REPO / "assets" / "census_standard.json"
    (tmp_path / committed.name).write_text(committed.read_text())
    assert report.main([str(tmp_path / committed.name), "--from-json"]) == 0
    for ext in ("json", "md"):
        assert (tmp_path / f"census_standard.{ext}").read_text() == (
            REPO / "assets" / f"census_standard.{ext}").read_text()


def test_a_json_read_from_assets_is_not_rewritten_without_update_assets(report, capsys):
    committed = sorted(REPO.joinpath("assets").glob("census_standard.*"))
    before = {p: p.stat().st_mtime_ns for p in committed}
    assert report.main([str(REPO / "assets" / "census_standard.json"), "--from-json"]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert "is in assets/" in err and "--update-assets" in err
    assert {p: p.stat().st_mtime_ns for p in committed} == before
