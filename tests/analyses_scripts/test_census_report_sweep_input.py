"""analyses/census_report.py refuses a sweep.jsonl that lists no runs, and one that lists a run
twice, as `invperm sweep-report` does, in one line and without writing a report."""

import json

import pytest
from helpers import analysed, files_in, run_analyses_script

from invperm_interp.sweep.report import write_sweep_report


def record(name: str, seed: int) -> dict:
    return {"name": name, "variant": "bidirectional_d6", "status": "stopped", "step": 700,
            "steps_to_solve": 700, "solve_mse": 1e-3, "final": {"step": 700, "mse": 9e-4, "row_acc": 1.0},
            "mechanism": "two_block", "model": {"layout": {"d": 6}, "attention_dir": "bidirectional"},
            "train": {"seed": seed}, "analysis": analysed("two_block").to_dict()}


@pytest.mark.parametrize("text", ["", "\n\n"], ids=["empty", "blank lines"])
def test_a_sweep_listing_no_runs_is_refused_as_sweep_report_refuses_it(
        text, tmp_path, assets, script, capsys):
    (tmp_path / "sweep.jsonl").write_text(text)
    with pytest.raises(ValueError) as refused:  # `invperm sweep-report DIR` exits 2 with this line
        write_sweep_report(tmp_path)
    census_report = script("census_report")
    assert run_analyses_script(census_report, tmp_path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(refused.value) in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["assets", "sweep.jsonl"]
    assert files_in(assets) == {}


def test_a_run_listed_twice_is_refused_naming_both_lines(tmp_path, assets, script, capsys):
    line = json.dumps(record("bidirectional_d6_seed0", 0)) + "\n"
    (tmp_path / "sweep.jsonl").write_text(line + line)  # two copies of one file concatenated
    census_report = script("census_report")
    assert run_analyses_script(census_report, tmp_path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "sweep.jsonl line 2 repeats run bidirectional_d6_seed0 (line 1)" in err[0]
    assert not (tmp_path / "census.json").exists()
