"""``invperm report DIR --workers``: analyses in worker processes, complete records reused."""

import json

import pytest
from helpers import analysed, run, small

from invperm_interp.analysis.record import ModelAnalysis
from invperm_interp.cli.main import main
from invperm_interp.runs.directory import RunDir


@pytest.mark.slow
def test_report_directory_analyses_runs_in_workers_and_reuses_their_records(tmp_path):
    for seed in (0, 1):
        model_cfg, train_cfg = small(3, seed=seed, out_dir=str(tmp_path / f"run{seed}"))
        run(model_cfg, train_cfg)
    assert main(["report", str(tmp_path), "--n", "32", "--workers", "2"]) == 0
    for seed in (0, 1):
        run_dir = tmp_path / f"run{seed}"
        record = ModelAnalysis.from_json(RunDir(run_dir).analysis.read_text())
        assert record.n_samples == 32 and record.sample_patterns is not None
        RunDir(run_dir).report.unlink()
    written = RunDir(tmp_path / "run0").analysis.stat().st_mtime_ns
    # a run a sweep analysed shows the sweep's verdict beside the page's own
    record = analysed("two_block", samples=64, seed=3).to_dict()
    RunDir(tmp_path / "run0").mechanism.write_text(json.dumps(record))
    assert main(["report", str(tmp_path), "--n", "32", "--workers", "1"]) == 0
    assert RunDir(tmp_path / "run0").analysis.stat().st_mtime_ns == written  # reused
    assert "the rule names <b>two_block</b> on 64 fresh samples (seed 3)" in \
        RunDir(tmp_path / "run0").report.read_text()
    assert "The sweep's verdict" not in RunDir(tmp_path / "run1").report.read_text()


@pytest.mark.slow
def test_failing_jobs_in_this_process_and_a_worker_are_raised_and_none_counts_done(tmp_path):
    from invperm_interp.cli.analyze import _run_jobs

    missing = [(tmp_path / f"missing{i}", dict(n=8, seed=0, bundle=None, threads=1, max_memory=None))
               for i in range(4)]
    finished = []
    with pytest.raises(ValueError, match="must hold a run"):
        _run_jobs(missing, 2, lambda: finished.append(1))
    assert finished == []


@pytest.mark.slow
def test_an_interrupted_report_of_a_directory_keeps_its_reports_and_says_how_to_resume(
        tmp_path, monkeypatch, capsys):
    """Ctrl-C (or SIGTERM) during ``invperm report DIR``: one line saying how many reports were
    written and that the same command writes the rest; exit 130 (143)."""
    import signal

    from invperm_interp.cli import analyze as cli_analyze
    from invperm_interp.training.signals import Interrupted

    model_cfg, train_cfg = small(3, seed=0, out_dir=str(tmp_path / "run0"))
    run(model_cfg, train_cfg)
    for stop, code in ((KeyboardInterrupt(), 130), (Interrupted("", signal.SIGTERM), 143)):
        def stopped(jobs, workers, done, stop=stop):
            raise stop

        monkeypatch.setattr(cli_analyze, "_run_jobs", stopped)
        assert main(["report", str(tmp_path), "--n", "16", "--workers", "1"]) == code
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "0 of 1 reports written; rerun the same command to write the rest" in err, err
