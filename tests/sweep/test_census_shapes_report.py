"""analyses/census_shapes_report.py counts a sweep over shapes by what the rule names (construction
and placement) and by what the other heads do: alone, copied or split."""

import json

import pytest
from helpers import analysed, analyses_script


@pytest.fixture
def report(monkeypatch):
    return analyses_script(monkeypatch, "census_shapes_report")


def record(name, layers, heads, seed, mechanism, also=(), solved=True):
    return {"name": name, "variant": "bidirectional_d8", "status": "stopped", "step": 700,
            "steps_to_solve": 700 if solved else None, "solve_mse": 1e-3,
            "final": {"step": 700, "mse": 9e-4, "row_acc": 1.0}, "mechanism": str(mechanism),
            "model": {"layout": {"d": 8}, "attention_dir": "bidirectional", "n_layers": layers,
                      "n_heads": heads},
            "train": {"seed": seed}, "analysis": analysed(mechanism, also=also).to_dict()}


def test_names_placements_and_roles_are_counted_per_shape(tmp_path, report):
    from invperm_interp.maths.placement import SUM, Placement

    rows = [record("a", 2, 1, 0, "two_block"),
            record("b", 2, 2, 0, Placement("two_block", (0, 1), (0, 1), (2, 2)),
                   also=[Placement("two_block", (0, 1), (1, 1), (2, 2))]),
            record("c", 2, 2, 1, Placement("two_block", (0, 1), (SUM, SUM), (2, 2))),
            record("d", 3, 2, 0, Placement("appendix_b", (0, 2), (1, 0), (2, 2, 2))),
            record("e", 3, 2, 1, "none"),
            record("f", 3, 2, 2, "none", solved=False)]
    (tmp_path / "sweep.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert report.main([str(tmp_path)]) == 0
    summary = {s["shape"]: s for s in json.loads((tmp_path / "census_shapes.json").read_text())["summary"]}
    assert summary["2x1"]["roles"]["alone"].startswith("1 of 1 (")
    wide = summary["2x2"]
    assert wide["names"] == {"two_block @ L1h0→L2h1": 1, "two_block @ L1(h0+h1)→L2(h0+h1)": 1}
    assert wide["roles"]["copied"].startswith("1 of 2 (") and wide["roles"]["split"].startswith("1 of 2 (")
    deep = summary["3x2"]
    assert (deep["runs"], deep["solved"]) == (3, 2)
    assert deep["named"].startswith("1 of 2 (") and deep["none"].startswith("1 of 2 (")
    assert deep["zero_ablation"] == {"appendix_b": 1, "none": 1}
    text = (tmp_path / "census_shapes.md").read_text()
    assert "| bidirectional | 3x2 | 3 | 3 | 2 |" in text and "appendix_b @ L1h1→L3h0 ×1" in text
    assert (tmp_path / "census_shapes.png").stat().st_size > 1000


def test_a_folder_without_sweep_jsonl_is_one_line(tmp_path, report, capsys):
    assert report.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sweep.jsonl" in err[0]


def test_knocking_out_heads_finds_the_placement_and_an_idle_layer(report, monkeypatch, tmp_path):
    """A placed construction on 3 layers of 2 heads, every other cell zero: only the placement's
    two heads are needed, layer 2 is idle, and the run's role is 'alone'; with a head of the
    placement not needed (a copy covers it) it is 'copied', with another head needed 'split'."""
    from types import SimpleNamespace

    from invperm_interp.maths.placement import Placement, build

    placed = Placement("two_block", (0, 2), (0, 1), (2, 2, 2))
    model = build(placed, 5, 100.0)
    monkeypatch.setattr(report.Run, "load", lambda path: SimpleNamespace(model=model))
    found = report.knockouts(tmp_path, samples=64)
    needed = report.needed_heads(found)
    assert needed == ["L1h0", "L3h1"] and found["L2h0"] == found["L1h1"] == 1.0
    assert report.idle_layers((2, 2, 2), needed) == [2]
    named = analysed(placed)
    assert report.role(named, (2, 2, 2), needed) == "alone"
    assert report.role(named, (2, 2, 2), ["L3h1"]) == "copied"  # L1h0 not needed: a copy covers it
    assert report.role(named, (2, 2, 2), ["L1h0", "L2h0", "L3h1"]) == "split"
