"""A line of ``metrics.jsonl`` is one typed record: written and read back by one pair of functions,
old lines (version 1, with ``attention_dir``) still read, anything else refused in one line."""

import json
import math

import pytest
from helpers import REPO

from invperm_interp.runs.directory import RunDir
from invperm_interp.runs.evaluation import VERSION, Evaluation

REFERENCE_RUNS = REPO / "tests" / "data" / "reference_runs"


def test_a_record_reads_back_what_it_wrote():
    full = Evaluation(5, 0.25, 0.9, 0.5, 0.125, train_mse=0.3, lr=1e-2, causal_floor=2.5,
                      wall_time=1.5, stopped="stop_at_mse")
    bare = Evaluation(0, 3.0)
    for record in (full, bare):
        line = json.dumps(record.to_dict())
        assert Evaluation.from_dict(json.loads(line)) == record
    assert bare.to_dict() == {"step": 0, "mse": 3.0, "version": VERSION}  # unset fields left out
    assert full.without_wall_clock().wall_time is None
    assert full.excess() == pytest.approx(0.25 - 2.5) and bare.excess() is None


@pytest.mark.parametrize("run", sorted(p.name for p in REFERENCE_RUNS.iterdir()))
def test_the_committed_version_1_lines_read(run):
    """The reference runs' lines carry ``attention_dir`` and no version: read, every number kept."""
    path = REFERENCE_RUNS / run / "metrics.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    records = RunDir(path.parent).read_metrics()
    assert len(records) == len(lines) > 1
    for line, record in zip(lines, records):
        assert "version" not in line and "attention_dir" in line
        kept = {k: v for k, v in line.items() if k != "attention_dir" and v is not None}
        assert record.to_dict() == {**kept, "version": VERSION}


@pytest.mark.parametrize("data, match", [
    ({"step": 1, "mse": 0.5, "version": VERSION + 1}, "version 3; this package reads 1 to 2"),
    ({"step": 1, "mse": 0.5, "attention_dir": "causal", "version": 2}, r"has no \['attention_dir'\]"),
    ({"step": 1, "mse": 0.5, "loss": 0.5}, r"has no \['loss'\]"),
    ({"step": 1}, "needs an integer 'step' and a finite number 'mse'"),
    ({"step": -1, "mse": 0.5}, "step must be an integer >= 0"),
    ({"step": 1.0, "mse": 0.5}, "step must be an integer >= 0"),
    ({"step": 1, "mse": math.inf}, "mse must be a finite number"),
    ({"step": 1, "mse": True}, "mse must be a finite number"),
    ({"step": 1, "mse": 0.5, "row_acc": "1"}, "row_acc must be a number or None"),
    ({"step": 1, "mse": 0.5, "stopped": 3}, "stopped must be a reason"),
    ([1, 2], "an evaluation record is a JSON object"),
])
def test_what_is_not_a_record_is_refused_in_one_line(data, match):
    with pytest.raises(ValueError, match=match):
        Evaluation.from_dict(data)
