"""``analyze`` reproduces the committed records of two trained census runs (d = 6, a bidirectional
and a causal-scratch one): every name, cell, verdict, count and flag exactly, every number within
``REL`` relative (``ABS`` absolute near zero). The records are the analysis's output when they were
written; a speed-up must not move them. A change of the analysis that should move them regenerates
them on purpose: ``PYTHONPATH=src:tests python tests/analysis/test_reference_records.py``.

The tolerance follows the float32 rule of ``tests/README.md``: the runs are float32 models, and
another CPU, BLAS path or thread count sums in another order. Re-analysed with two torch threads
instead of one, numbers here move by up to 2.1e-6 relative (attention patterns after a softmax of
scores of size ~30: ``|s|·ε₃₂``); on another x86-64 CPU by ~1e-6. ``REL = 1e-4`` leaves a margin of
about 50 over that, while any change of what is computed (another fit, sample, cell, threshold or
batch) moves these numbers by 1e-3 or more. The test below re-analyses with two threads too, so a
summation order other than the one the records were made with is tried on every machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from helpers import differences

from invperm_interp import sample_batch
from invperm_interp.analysis.record import analyze
from invperm_interp.training.run import Run

RUNS = Path(__file__).resolve().parent.parent / "data" / "reference_runs"
NAMES = ("bidirectional_d6_seed0", "scratch_d6_seed2")
REL, ABS = 1e-4, 1e-8


def fresh_record(name: str, threads: int | None = None, hooked: bool = False) -> dict:
    """The analysis of the committed run on 512 samples drawn from seed 0 (``invperm analyze``'s),
    with ``threads`` torch threads (default: as set), of its plain model (what ``invperm analyze``
    reads) or, with ``hooked``, of its hooked model."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        run = Run.load(RUNS / name)
        model = run.model if hooked else run.analysis_model
        batch = sample_batch(model.cfg.layout, 512, generator=torch.Generator().manual_seed(0),
                             dtype=model.cfg.torch_dtype)
        return json.loads(analyze(model, batch, f"run {name}").to_json())
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.parametrize("threads, hooked", [(1, False), (2, True)])
@pytest.mark.parametrize("name", NAMES)
def test_analysis_reproduces_the_committed_record(name, threads, hooked):
    """Either model, plain or hooked, gives the record (one of each, so each thread count runs)."""
    want = json.loads((RUNS / name / "analysis.json").read_text())
    found = differences(want, fresh_record(name, threads, hooked), REL, ABS)
    assert not found, f"{len(found)} differences, first: {found[:8]}"


def test_differences_sees_a_number_moved_by_more_than_the_tolerance_and_a_renamed_cell():
    want = {"mse": 0.5, "cells": [[0, 0, "x", "pos.P", "I"]], "flag": True}
    assert differences(want, {"mse": 0.5 * (1 + 1e-8), "cells": [[0, 0, "x", "pos.P", "I"]],
                              "flag": True}, REL, ABS) == []
    assert differences(want, {"mse": 0.5 * (1 + 2e-6), "cells": [[0, 0, "x", "pos.P", "I"]],
                              "flag": True}, REL, ABS) == []  # another CPU's float32 rounding
    moved = {"mse": 0.5 * (1 + 1e-3), "cells": [[0, 0, "x", "pos.P", "-I"]], "flag": 1}
    assert len(differences(want, moved, REL, ABS)) == 3


if __name__ == "__main__":
    for name in sys.argv[1:] or NAMES:
        (RUNS / name / "analysis.json").write_text(json.dumps(fresh_record(name), indent=1) + "\n")
        print(f"wrote {RUNS / name / 'analysis.json'}")
