"""What ``invperm timeline`` prints: cells named by layer as the pages name them, and one warning
line when the run's checkpoints are too sparse to place the loss's fall (naming the flag to add)."""

import json

import pytest

from invperm_interp.analysis.timeline import FINER, sparse_fall, timeline
from invperm_interp.cli import main
from invperm_interp.config import TrainConfig
from invperm_interp.maths.constructions import build
from invperm_interp.runs import checkpoint as ckpt
from invperm_interp.runs.config_file import config_hash
from invperm_interp.runs.directory import RunDir

D, BETA, LAST = 5, 12.0, 6
#: The evaluations: on the plateau (above a tenth of d/4 = 1.25) until step 1, then fallen by step 2.
CURVE = [(0, 2.0), (1, 1.9), (2, 0.01), (3, 0.004), (4, 0.002), (5, 0.001), (6, 0.0008)]


def fake_run(run_dir, checkpoints):
    """The construction with A scaled by k/LAST at each step k in ``checkpoints`` (and at LAST, the
    final weights), and the evaluations of :data:`CURVE` in its metrics.jsonl."""
    model = build("two_block", D, BETA)
    train_cfg = TrainConfig(steps=LAST, checkpoint_every=1, out_dir=str(run_dir))
    run = RunDir(run_dir)
    run.write_config(model.cfg, train_cfg)
    tensors, digest = ckpt.model_tensors(model), config_hash(model.cfg, train_cfg)
    for k in [*checkpoints, LAST]:
        scaled = {key: v * (k / LAST) if key.endswith("attn.A") else v for key, v in tensors.items()}
        ckpt.save(run.checkpoint(k) if k < LAST else run.final, scaled,
                  {"step": k, "config_hash": digest})
    (run_dir / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "mse": m, "row_acc": 0.0, "causal_floor": 0.0}) + "\n"
        for s, m in CURVE))
    return run_dir


@pytest.mark.parametrize("checkpoints, expected", [
    ((4, 5), (1, 2, None, 4)),   # the loss fell before the first checkpoint
    ((1,), (1, 2, 1, LAST)),      # checkpoints 1 and 6 around a fall of one step: 5 > FINER
    ((1, 2, 3, 4, 5), None),      # a checkpoint on either side of the fall
])
def test_sparse_fall_says_when_the_checkpoints_cannot_place_the_fall(tmp_path, checkpoints, expected):
    tl = timeline(fake_run(tmp_path / "run", checkpoints), n=64)
    fall = sparse_fall(tl)
    assert FINER * 1 < LAST - 1  # the second case is sparse by the rule's own measure
    if expected is None:
        assert fall is None
    else:
        assert (fall.after, fall.by, fall.checkpoint_before, fall.checkpoint_after) == expected
        assert (fall.mse_after, fall.mse_by) == (1.9, 0.01)


def test_a_loss_that_never_falls_is_not_called_sparse(tmp_path):
    from dataclasses import replace

    tl = timeline(fake_run(tmp_path / "run", (4, 5)), n=64)
    assert sparse_fall(replace(tl, curve=tuple((s, 2.4) for s, _ in CURVE))) is None  # a causal floor


def test_timeline_warns_in_one_line_naming_the_flag_and_names_cells_by_layer(tmp_path, capsys):
    run = fake_run(tmp_path / "run", (4, 5))
    assert main(["timeline", str(run), "--quiet", "--n", "64"]) == 0
    captured = capsys.readouterr()
    (warning,) = [line for line in captured.err.splitlines() if "warning" in line]
    assert warning.startswith("invperm timeline: warning: the loss falls between steps 1 and 2")
    assert "before the first checkpoint (step 4)" in warning and "--checkpoint-dense-every" in warning
    # cells as the pages and the figure write them: "layer 1: …", never "L1 …" (read as block L1.x)
    cells = [line.strip() for line in captured.out.splitlines() if line.strip().startswith("[")]
    assert cells and all(c.split("] ", 1)[1].startswith(("layer 1: ", "layer 2: ")) for c in cells)
    assert "] L1 " not in captured.out and "] L2 " not in captured.out
    # a checkpoint before the fall: the timeline's own --refine is named too
    run = fake_run(tmp_path / "run1", (1,))
    assert main(["timeline", str(run), "--quiet", "--n", "64"]) == 0
    err = capsys.readouterr().err
    assert "between checkpoints at steps 1 and 6" in err and "--refine 1:2" in err
    # dense enough: no warning
    run = fake_run(tmp_path / "run2", (1, 2, 3, 4, 5))
    assert main(["timeline", str(run), "--quiet", "--n", "64"]) == 0
    assert "warning" not in capsys.readouterr().err
