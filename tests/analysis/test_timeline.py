"""The mechanism over training (analysis.timeline, invperm timeline) and dense checkpoints."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
import torch
from helpers import run, small, strip

from invperm_interp import Layout, ModelConfig
from invperm_interp.analysis.mechanism import mechanism
from invperm_interp.analysis.timeline import Timeline, timeline
from invperm_interp.cli.main import main
from invperm_interp.config import TrainConfig
from invperm_interp.maths.constructions import build
from invperm_interp.model.disentangled import readout_forward
from invperm_interp.runs import checkpoint as ckpt
from invperm_interp.runs.config_file import config_hash
from invperm_interp.runs.directory import RunDir
from invperm_interp.task import sample_batch
from invperm_interp.training.run import Run
from invperm_interp.training.single import resume
from invperm_interp.training.trainer import on_schedule

N_STEPS, BETA, D = 24, 12.0, 5


def interpolated_run(run_dir, name="two_block", d=D, beta=BETA, n_steps=N_STEPS):
    """A run directory whose checkpoint k holds the construction with every A scaled by k/n_steps
    (W_U as built): a 'training' that moves from uniform attention to the construction."""
    model = build(name, d, beta)
    train_cfg = TrainConfig(steps=n_steps, checkpoint_every=1, out_dir=str(run_dir))
    run = RunDir(run_dir)
    run.write_config(model.cfg, train_cfg)
    tensors = ckpt.model_tensors(model)
    digest = config_hash(model.cfg, train_cfg)
    for k in range(1, n_steps + 1):
        scaled = {key: v * (k / n_steps) if key.endswith("attn.A") else v
                  for key, v in tensors.items()}
        path = run.checkpoint(k) if k < n_steps else run.final
        ckpt.save(path, scaled, {"step": k, "config_hash": digest})
    return model


def predicted_first_faithful(name, d, beta, n_steps, n=512, seed=0):
    """The first k at which the construction at β·k/n_steps, run as is, gets 99% of rows exact with
    an MSE below the baseline d/4: the whole model is then the circuit, so the rule calls it
    faithful (rows exact, loss recovered 1)."""
    for k in range(1, n_steps + 1):
        model = build(name, d, beta * k / n_steps)
        batch = sample_batch(model.cfg.layout, n, torch.Generator().manual_seed(seed),
                             dtype=torch.float64)
        with torch.no_grad():
            out = readout_forward(model, batch.X).numpy()
        Y = batch.Y.numpy()
        rows = ((out.round() == Y).all(-1)).mean()
        err = ((out - Y) ** 2).sum(-1).mean()
        if rows >= 0.99 and err < d / 4:
            return k
    return None


@pytest.mark.parametrize("name", ["two_block", "appendix_b"])
def test_an_interpolated_construction_turns_faithful_when_predicted(tmp_path, name):
    interpolated_run(tmp_path / "run", name)
    expected = predicted_first_faithful(name, D, BETA, N_STEPS)
    assert expected is not None and 1 < expected < N_STEPS  # the test sees a transition
    tl = timeline(tmp_path / "run")
    assert [s.step for s in tl.steps] == list(range(1, N_STEPS + 1))
    assert tl.final_mechanism == name
    assert tl.first_faithful == expected
    assert tl.faithful_since == expected
    assert tl.steps[-1].mechanism == name
    # the cells' fitted β grow linearly with the interpolation (the weights are exactly k/n of it)
    for s in tl.steps:
        for b in s.betas:
            assert b == pytest.approx(BETA * s.step / N_STEPS, rel=1e-6)
    assert Timeline.from_dict(json.loads(json.dumps(tl.to_dict()))) == tl


def test_stride_counts_back_from_the_last_checkpoint(tmp_path):
    interpolated_run(tmp_path / "run", n_steps=9)
    tl = timeline(tmp_path / "run", stride=3)
    assert [s.step for s in tl.steps] == [2, 5, 8, 9]  # 9: the final weights


def test_timeline_refuses_bad_input(tmp_path):
    with pytest.raises(ValueError, match="run_dir must hold a run"):
        timeline(tmp_path)
    with pytest.raises(ValueError, match="run must be a run directory or a Run"):
        timeline(3)
    interpolated_run(tmp_path / "run", n_steps=3)
    with pytest.raises(ValueError, match="stride must be an integer >= 1"):
        timeline(tmp_path / "run", stride=0)


def _checkpoint_a_directory(run):
    path = RunDir(run).checkpoint(2)
    path.unlink()
    path.mkdir()


def _checkpoint_not_finite(run):
    path = RunDir(run).checkpoint(2)
    tensors, meta = ckpt.load(path)
    tensors["model.blocks.0.attn.A"][0, 0, 0] = float("nan")
    ckpt.save(path, tensors, meta)  # a valid digest of NaN weights


def _checkpoint_of_another_step(run):
    RunDir(run).checkpoint(2).write_bytes(RunDir(run).checkpoint(1).read_bytes())


@pytest.mark.parametrize("damage, message", [
    (_checkpoint_a_directory, r"checkpoint \S+step_2.safetensors is not a file"),
    (_checkpoint_not_finite, r"checkpoint \S+step_2.safetensors holds weights that are not finite "
                             r"\(NaN or inf\) in model.blocks.0.attn.A"),
    (_checkpoint_of_another_step, r"checkpoint \S+step_2.safetensors holds step 1, not the step "
                                  r"its name says \(2\)"),
])
def test_a_damaged_checkpoint_is_one_line_naming_it(tmp_path, capsys, damage, message):
    """A checkpoint that is a directory, holds NaN weights under a valid digest, or is another
    step's file under this step's name: one line naming it, not a wrong list of steps, a
    traceback from lstsq, or another step's weights in this step's row."""
    interpolated_run(tmp_path / "run", n_steps=3)
    damage(tmp_path / "run")
    assert main(["timeline", str(tmp_path / "run"), "--quiet", "--n", "64"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.fullmatch("invperm timeline: error: " + message + ".*", err[0]), err
    assert not (tmp_path / "run" / "timeline.json").exists()


@pytest.mark.parametrize("seed", ["-1", str(2**62), "1180591620717411303424"])
def test_timeline_and_discover_refuse_a_seed_outside_0_to_2_62(tmp_path, capsys, seed):
    """The bound of every ``--seed`` (tests/cli/test_bad_input.py), as argparse's error."""
    interpolated_run(tmp_path / "run", n_steps=2)
    for command in ("timeline", "discover"):
        with pytest.raises(SystemExit) as e:
            main([command, str(tmp_path / "run"), "--seed", seed])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1] == (f"invperm {command}: error: argument --seed: seed must be an integer in "
                           f"[0, 2^62), got {seed}")


@pytest.mark.parametrize("text", ["{", "[]", "{}", '{"steps": 5}', "null"])
def test_analyze_leaves_out_a_damaged_timeline_with_a_warning_naming_it(tmp_path, capsys, text):
    run = tmp_path / "run"
    interpolated_run(run, n_steps=2)
    (run / "timeline.json").write_text(text)
    assert main(["analyze", str(run), "--n", "64"]) == 0
    err = capsys.readouterr().err
    assert f"{run / 'timeline.json'} is damaged" in err and "Traceback" not in err
    assert "<h2>Over training</h2>" in (run / "report.html").read_text()


def test_the_figure_of_a_final_circuit_without_cells_draws_without_a_warning(tmp_path):
    """A run whose minimal circuit has no cell (one trained briefly): no legend of nothing, which
    matplotlib warned about on the command line."""
    import warnings

    from invperm_interp.analysis.hypothesis import Hypothesis
    from invperm_interp.viz.timeline import plot_timeline

    interpolated_run(tmp_path / "run", n_steps=2)
    tl = timeline(tmp_path / "run", n=64)
    empty = replace(tl, final_mechanism="none", hypothesis=Hypothesis("minimal", (), None, "cells"),
                    steps=tuple(replace(s, betas=(), effects=()) for s in tl.steps))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot_timeline(empty)


def test_cli_timeline_writes_table_json_and_figure(tmp_path, capsys):
    interpolated_run(tmp_path / "run", n_steps=6)
    assert main(["timeline", str(tmp_path / "run"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "final mechanism two_block" in out and "faithful" in out
    data = json.loads((tmp_path / "run" / "timeline.json").read_text())
    assert [s["step"] for s in data["steps"]] == list(range(1, 7))
    for suffix in ("png", "svg"):
        assert (tmp_path / "run" / f"timeline.{suffix}").stat().st_size > 1000
    assert main(["timeline", str(tmp_path / "nothing")]) == 2
    assert "run_dir must hold a run" in capsys.readouterr().err


def test_the_report_shows_the_timeline_once_it_exists(tmp_path):
    run = tmp_path / "run"
    interpolated_run(run, n_steps=6)
    assert main(["analyze", str(run), "--n", "64"]) == 0
    page = (run / "report.html").read_text()
    assert "<h2>Over training</h2>" in page and "invperm timeline RUN" in page
    assert main(["timeline", str(run), "--quiet"]) == 0
    assert main(["analyze", str(run), "--n", "64"]) == 0
    page = (run / "report.html").read_text()
    section = page.split("<h2>Over training</h2>", 1)[1].split("<h2>", 1)[0]
    tl = json.loads((run / "timeline.json").read_text())
    first = next(s["step"] for s in tl["steps"] if s["faithful"])
    assert f"first faithful at step {first}" in section and "6 checkpoints" in section
    assert "data:image/svg+xml" in section
    head = page.split("<h2>Headline</h2>", 1)[1].split("<h2>", 1)[0]  # the result, first screen
    assert (f"Over training (below): the final circuit alone is first faithful at step {first} "
            f"of {tl['steps'][-1]['step']}.") in head


# -- dense checkpoints ---------------------------------------------------------------------------
def expected_checkpoints(cfg: TrainConfig, metrics: list) -> list[int]:
    """The schedule as the config's docstring states it, from the run's evaluations."""
    steps = []
    for s in range(1, cfg.steps + 1):
        solved = any(m.mse < cfg.checkpoint_dense_until for m in metrics if m.step < s)
        if s % cfg.checkpoint_every == 0 or s % cfg.checkpoint_dense_every == 0 and not solved \
                or s == cfg.steps:
            steps.append(s)
    return steps


def test_dense_checkpoints_until_solved_then_sparse_and_resume_is_bit_identical(tmp_path):
    model_cfg, base = small(steps=24, eval_every=3, checkpoint_every=10, checkpoint_dense_every=2)
    probe = run(model_cfg, base)  # in memory: where the evaluations go
    mses = sorted(m.mse for m in probe.metrics)
    cfg = replace(base, checkpoint_dense_until=mses[len(mses) // 2])  # solved half way
    straight = run(model_cfg, replace(cfg, out_dir=str(tmp_path / "a")))
    kept = [s for s, _ in RunDir(tmp_path / "a").checkpoints()]
    assert kept == expected_checkpoints(cfg, straight.metrics)
    dense = [s for s in kept if s % 10 and s != cfg.steps]
    assert dense and max(dense) < cfg.steps - 2  # dense early, none after the run was solved
    assert len(kept) <= cfg.max_checkpoints
    run(model_cfg, replace(cfg, out_dir=str(tmp_path / "b")), stop_at=7)
    resumed = resume(tmp_path / "b", progress=False)
    assert strip(resumed.metrics) == strip(straight.metrics)
    for key, value in Run.load(tmp_path / "a").weights.state_dict().items():
        assert torch.equal(value, resumed.weights.state_dict()[key]), key
    assert [s for s, _ in RunDir(tmp_path / "b").checkpoints()] == sorted(set(kept) | {7})
    # what a pruning keeps: the schedule's steps, not the stop at 7 nor the last step (24)
    assert on_schedule(tmp_path / "b", cfg) == set(kept) - {cfg.steps}


def test_dense_checkpoint_options_are_checked():
    with pytest.raises(ValueError, match="checkpoint_dense_every must be an integer >= 1"):
        TrainConfig(checkpoint_dense_every=0)
    with pytest.raises(ValueError, match="checkpoint_dense_until must be a finite number > 0"):
        TrainConfig(checkpoint_dense_until=float("nan"))
    cfg = TrainConfig(steps=1000, checkpoint_every=500, checkpoint_dense_every=50)
    assert cfg.max_checkpoints == 2 + 20 + 2


@pytest.mark.slow
def test_a_trained_runs_timeline_ends_with_the_mechanism_of_its_final_weights(tmp_path):
    model_cfg = ModelConfig(Layout.plain(6), attention_dir="bidirectional", readout="P")
    cfg = TrainConfig(steps=1500, batch_size=128, eval_every=25, eval_size=512,
                      checkpoint_every=1000, checkpoint_dense_every=25, stop_at_mse=1e-3,
                      device="cpu", threads=1, out_dir=str(tmp_path / "run"))
    trained = run(model_cfg, cfg)
    tl = timeline(tmp_path / "run", stride=2)
    batch = sample_batch(model_cfg.layout, 512, torch.Generator().manual_seed(0))
    assert tl.steps[-1].step == trained.step
    assert tl.steps[-1].mechanism == tl.final_mechanism
    assert tl.final_mechanism == str(mechanism(Run.load(tmp_path / "run").model, batch).answer)
    assert len(tl.steps) > 5 and tl.steps[0].mse > 100 * tl.steps[-1].mse


def test_the_timeline_figure_names_cells_by_layer_in_readable_type(tmp_path):
    from invperm_interp.viz.heatmaps import LABEL_PT
    from invperm_interp.viz.timeline import plot_timeline

    interpolated_run(tmp_path / "run", "two_block", n_steps=3)
    fig = plot_timeline(timeline(tmp_path / "run"))
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    labels = [t.get_text() for legend in legends for t in legend.get_texts()]
    assert "layer 1: I at (pos.Y, pos.P)" in labels and "layer 2: I at (pos.P, L1.x)" in labels
    assert not any(t.startswith("L1 ") for t in labels)  # "L1" names a block (L1.x), not a layer
    assert min(t.get_fontsize() for legend in legends for t in legend.get_texts()) >= LABEL_PT


def test_the_progress_bar_counts_every_row_of_the_timeline(tmp_path, capsys):
    interpolated_run(tmp_path / "run", n_steps=4)
    tl = timeline(tmp_path / "run", progress=True)
    err = capsys.readouterr().err
    assert len(tl.steps) == 4 and f"{len(tl.steps)}/{len(tl.steps)}" in err  # the final weights too


def test_the_timeline_figure_keeps_equal_curves_apart_and_labels_the_band(tmp_path):
    from invperm_interp.viz.timeline import plot_timeline

    interpolated_run(tmp_path / "run", "two_block", n_steps=4)
    tl = timeline(tmp_path / "run")
    fig = plot_timeline(tl)
    top = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert tl.first_faithful is not None and f"first faithful (step {tl.first_faithful})" in top
    assert "final circuit faithful" in top or not any(s.faithful for s in tl.steps[:-1])
    cells = [line for line in fig.axes[2].get_lines() if line.get_label().startswith("layer ")]
    assert len(cells) == 2 and len({(ln.get_linestyle(), ln.get_marker()) for ln in cells}) == 2
    rows = fig.axes[1].get_lines()
    assert len({ln.get_linestyle() for ln in rows}) == 2  # the circuit's rows line is dashed
