"""A stretch of a finished run trained again in memory (training.replay) and a timeline refined over
it (analysis.timeline.refine): on the machine that trained it, the same weights and evaluations
bit for bit, and the same analysis as of the stored checkpoints."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from helpers import run, small

from invperm_interp.analysis.timeline import refine, timeline
from invperm_interp.runs import checkpoint as ckpt
from invperm_interp.runs.directory import RunDir
from invperm_interp.training.replay import Replay, replay


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 24-step run with a checkpoint every 2 steps and an evaluation every 3."""
    out = tmp_path_factory.mktemp("replay") / "run"
    model_cfg, cfg = small(steps=24, eval_every=3, checkpoint_every=10, checkpoint_dense_every=2,
                           checkpoint_dense_until=1e-12, out_dir=str(out))
    return run(model_cfg, cfg), out


def _files(folder):
    return sorted((p.name, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file())


def test_a_replay_meets_every_stored_checkpoint_and_evaluation_bit_for_bit(trained):
    result, out = trained
    before = _files(out)
    record = Replay()
    got = {step: ({k: v.clone() for k, v in ckpt.model_tensors(model).items()}, scores)
           for step, model, scores in replay(out, 4, 21, 3, record)}
    assert list(got) == [6, 9, 12, 15, 18, 21] == record.steps
    stored = [s for s, _ in RunDir(out).checkpoints() if 4 < s <= 21]
    assert record.compared == len(stored) == 8 and record.identical == 8
    assert record.largest_difference == 0.0
    for step in (6, 12, 18):  # a stored checkpoint: the same tensors
        want = RunDir(out).read_weights(step).tensors
        assert all(torch.equal(t, want[k]) for k, t in got[step][0].items())
    mse = {m.step: m.mse for m in result.metrics}
    for step in (6, 9, 12, 15, 18, 21):  # the run's own evaluations, bit for bit
        assert got[step][1].mse == mse[step]
    assert _files(out) == before  # the run's directory is only read


def test_a_replay_refuses_a_start_without_checkpoint_and_steps_out_of_range(trained):
    _, out = trained
    with pytest.raises(ValueError, match="start must be a step .* kept a checkpoint of"):
        next(replay(out, 5, 10, 1))
    with pytest.raises(ValueError, match=r"end must be an integer step in \(4, 24\]"):
        next(replay(out, 4, 25, 1))
    with pytest.raises(ValueError, match="every must be an integer >= 1"):
        next(replay(out, 4, 10, 0))


@pytest.mark.slow
def test_a_refined_timeline_is_the_timeline_of_the_stored_checkpoints(trained):
    """Every step a coarse timeline skipped, analysed on replayed weights, equals the analysis of
    the stored checkpoint of that step; the curve gains the replay's evaluations."""
    _, out = trained
    every = timeline(out)  # every stored checkpoint: steps 2, 4, …, 22 and the final 24
    coarse = timeline(out, stride=3)
    fine, record = refine(coarse, out, 4, 16, 2)
    assert record.identical == record.compared == 6
    assert len(coarse.steps) < len(fine.steps)
    want = {s.step: s.to_dict() for s in every.steps}
    refined = {s.step: s.to_dict() for s in fine.steps}
    assert set(range(6, 17, 2)) <= set(refined)
    for step, analysed in refined.items():
        assert analysed == want[step], step
    with pytest.raises(ValueError, match="tl must be the timeline of"):
        refine(replace(coarse, run="another"), out, 4, 16, 2)
    assert set(coarse.curve) <= set(fine.curve)  # the run's evaluations kept, the replay's added
    assert {s for s, _ in fine.curve} - {s for s, _ in coarse.curve} == {8, 10, 14, 16}


@pytest.mark.slow
def test_cli_timeline_refine_adds_the_replayed_steps_and_names_a_bad_window(trained, tmp_path, capsys):
    from invperm_interp.cli.main import main

    _, out = trained
    assert main(["timeline", str(out), "--stride", "4", "--refine", "4:10:3", "--quiet", "--n", "64",
                 "--out", str(tmp_path)]) == 0
    assert "3 steps up to 10 (the multiples of 3) trained again from the checkpoint at step 4: " \
           "3 of 3 stored checkpoints met bit for bit" in capsys.readouterr().out
    data = json.loads((tmp_path / "timeline.json").read_text())
    assert {6, 9, 10} <= {s["step"] for s in data["steps"]}
    with pytest.raises(SystemExit) as stop:
        main(["timeline", str(out), "--refine", "9:3", "--quiet"])
    assert stop.value.code == 2
    assert "expected START:END or START:END:EVERY" in capsys.readouterr().err
    assert main(["timeline", str(out), "--refine", "5:9", "--quiet", "--n", "64",
                 "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "start must be a step" in err[0], err
