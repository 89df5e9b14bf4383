"""analyses/continue_unsolved.py: a sweep's unsolved runs trained on in copies of their own."""

import json

import pytest
from helpers import analyses_script, fake_mechanism, tiny_grid_text

from invperm_interp.runs.directory import RunDir
from invperm_interp.sweep.engine import run_sweep


@pytest.fixture
def swept(tmp_path, monkeypatch):
    """A tiny sweep (4 runs of 10 steps) whose mechanism analysis is faked; none solves."""
    seen = fake_mechanism(monkeypatch, "appendix_b")
    grid = tmp_path / "grid.toml"
    grid.write_text(tiny_grid_text(seeds="{start = 0, stop = 2}", d="[2, 3]", steps=10, every=5,
                                   head="solve_mse = 1e-12\nmechanism = {samples = 64}"))
    out = tmp_path / "sweep"
    run_sweep(grid, out, executor="debug", progress=False)
    return out, seen


def test_unsolved_runs_train_on_in_copies_and_the_sweep_is_untouched(swept, tmp_path, monkeypatch):
    out, seen = swept
    script = analyses_script(monkeypatch, "continue_unsolved")
    copies = tmp_path / "copies"
    assert script.main([str(out), str(copies), "--prefix", "d3_", "--steps", "20", "--workers", "1"]) == 0
    result = json.loads((copies / "continued.json").read_text())
    assert [r["run"] for r in result["runs"]] == ["d3_seed0", "d3_seed1"] and result["solved"] == 0
    assert all(r["steps"] == 20 and r["mechanism"] is None for r in result["runs"])
    assert result["settings"] == {"samples": 64, "seed": 0, "batches": 1, "mean_ablation": False,
                                  "resample_ablation": False}
    assert RunDir(out / "d3_seed0").read_metrics()[-1].step == 10  # the sweep's own run as it was
    assert not (copies / "d3_seed0" / "mechanism.json").exists()  # the old weights' analysis dropped
    before = (copies / "d3_seed0" / "final.safetensors").stat().st_mtime_ns
    assert script.main([str(out), str(copies), "--prefix", "d3_", "--steps", "20", "--workers", "1"]) == 0
    assert (copies / "d3_seed0" / "final.safetensors").stat().st_mtime_ns == before  # not redone
    assert script.main([str(out), str(copies), "--steps", "10"]) == 2  # not past the runs' steps


def test_a_copy_that_solves_is_analysed_as_the_sweep_analyses(swept, tmp_path, monkeypatch):
    out, seen = swept
    lines = [json.loads(x) for x in (out / "sweep.jsonl").read_text().splitlines()]
    for line in lines:  # recorded unsolved; any MSE now counts as solved
        line["solve_mse"] = 1e9
    (out / "sweep.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    script = analyses_script(monkeypatch, "continue_unsolved")
    copies = tmp_path / "copies"
    assert script.main([str(out), str(copies), "--limit", "1", "--steps", "15", "--workers", "1"]) == 0
    result = json.loads((copies / "continued.json").read_text())
    assert result["solved"] == 1 and result["runs"][0]["mechanism"] == "appendix_b"
    assert result["runs"][0]["solved_at"] == 0 and len(seen) == 5  # 4 in the sweep, 1 copy
