"""A run that diverged: ``invperm train`` records it in ``diverged.json`` as a sweep does, and the
commands that read a run's weights say it diverged, not that it is still training."""

import pytest

from invperm_interp.cli import main
from invperm_interp.runs.directory import RunDir

TINY = ["--d", "4", "--batch-size", "16", "--eval-every", "5", "--eval-size", "32", "--device", "cpu",
        "--threads", "1", "--no-progress"]


def one_error_line(argv, capsys) -> str:
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"invperm {argv[0]}: error: "), lines
    return lines[0]


@pytest.fixture(scope="module")
def diverged(tmp_path_factory):
    out = tmp_path_factory.mktemp("diverged") / "R"
    assert main(["train", *TINY, "--steps", "20", "--lr", "1e30", "--out", str(out)]) == 2
    return out


def test_train_records_the_divergence_as_a_sweep_does(diverged):
    run = RunDir(diverged)
    assert run.is_diverged and run.is_done and not run.is_finished
    record = run.read_diverged()
    assert record["step"] == 1 and record["error"].startswith("training diverged")


@pytest.mark.parametrize("command", ["analyze", "timeline"])
def test_analyze_and_timeline_say_the_run_diverged(diverged, command, capsys):
    line = one_error_line([command, str(diverged), "--n", "16"], capsys)
    assert line.endswith(f"run {diverged} diverged at step 1 (lr 1e+30): nothing to analyse"), line

