"""analyses/census_report.py reads a census sweep's sweep.jsonl only and writes its report next to
the runs unless asked to update the checkout's assets/."""

import json
import sys

import pytest
from helpers import REPO

ANALYSES = REPO / "analyses"


@pytest.fixture
def census_report(monkeypatch):
    monkeypatch.syspath_prepend(str(ANALYSES))
    sys.modules.pop("census_report", None)
    import census_report

    return census_report


def record(name, attention_dir, d, seed, mechanism, solved=True):
    tested = [{"name": "two_block", "rows_exact": 1.0, "loss_recovered": 0.97, "signs_agree": True,
               "faithful": True}]
    analysis = {"version": 1, "samples": 512, "seed": 12345, "circuit_mse": 0.01,
                "circuit_rows_exact": 1.0, "loss_recovered": 0.97, "without_mse": 2.0,
                "minimal_named": True, "minimal_size": 2, "minimal_faithful": True,
                "minimal_rows_exact": 1.0, "minimal_loss_recovered": 0.97,
                "minimal_weight_share": 0.9, "minimal_read": ["P"], "minimal_cells": [],
                "tested": tested}
    return {"name": name, "variant": name.rsplit("_", 1)[0], "status": "stopped", "step": 700,
            "steps_to_solve": 700 if solved else None, "solve_mse": 1e-3,
            "final": {"step": 700, "mse": 9e-4, "row_acc": 1.0}, "mechanism": mechanism,
            "model": {"layout": {"d": d}, "attention_dir": attention_dir},
            "train": {"seed": seed}, "analysis": analysis}


def test_the_report_is_written_next_to_the_runs_not_into_assets(tmp_path, census_report):
    rows = [record("bidirectional_d6_seed0", "bidirectional", 6, 0, "two_block"),
            record("bidirectional_d6_seed1", "bidirectional", 6, 1, "none"),
            record("scratch_d6_seed0", "causal", 6, 0, "theorem3_superposed", solved=False)]
    unfinished = dict(rows[0], name="bidirectional_d6_seed2", status="unfinished", mechanism=None,
                      analysis=None)
    (tmp_path / "sweep.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + [unfinished]))
    assets = {p: p.stat().st_mtime_ns for p in (ANALYSES.parent / "assets").glob("census.*")}
    assert census_report.main([str(tmp_path)]) == 0
    for ext in ("json", "md", "png", "svg"):
        assert (tmp_path / f"census.{ext}").stat().st_size > 100
    assert {p: p.stat().st_mtime_ns for p in (ANALYSES.parent / "assets").glob("census.*")} == assets
    summary = json.loads((tmp_path / "census.json").read_text())["summary"]
    bi = next(s for s in summary if s["model"] == "bidirectional")
    assert (bi["runs"], bi["planned"], bi["solved (MSE < 1e-3)"]) == (2, 3, 2)
    assert bi["mechanisms (of solved)"] == "two_block: 1, none: 1"
    scratch = next(s for s in summary if s["model"] == "scratch")
    assert scratch["solved (MSE < 1e-3)"] == 0


def test_a_folder_without_sweep_jsonl_is_one_line(tmp_path, census_report, capsys):
    assert census_report.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sweep.jsonl" in err[0]
