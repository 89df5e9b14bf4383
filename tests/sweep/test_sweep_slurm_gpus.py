"""A grid whose runs train on ``cuda`` but whose ``[slurm]`` table asks for no GPU is refused by the
grid check for ``--executor slurm`` (Slurm would give its tasks none, and every run would fail, a
rerun the same way); no cluster is needed: nothing is submitted."""

import pytest

from invperm_interp.cli import main
from invperm_interp.sweep import engine
from invperm_interp.sweep.grid import load_grid

GRID = """
[model]
d = 2
[train]
steps = 20
batch_size = 16
eval_every = 5
eval_size = 32
device = "{device}"
[slurm]
time = 10
{gpus}
"""
VARIANTS = """
[train]
steps = 20
[[variants]]
name = "cpu"
train = {device = "cpu"}
[[variants]]
name = "gpu"
train = {device = ["cpu", "cuda:1"]}
"""
WHY = ("on Slurm needs [slurm] gpus = N: a task that asks for no GPU gets none; give gpus, or "
       "device = \"auto\" to train on the task's CPUs")


def _grid(tmp_path, text):
    path = tmp_path / "grid.toml"
    path.write_text(text)
    return path


def test_a_cuda_grid_without_slurm_gpus_is_one_line_before_anything_is_submitted(tmp_path, monkeypatch,
                                                                                   capsys):
    def submitted(*args):
        raise AssertionError("the sweep reached Slurm")

    monkeypatch.setattr(engine, "SubmititArray", submitted)
    path = _grid(tmp_path, GRID.format(device="cuda", gpus=""))
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--executor", "slurm", "--out", str(out), "--quiet"]) == 2
    said = capsys.readouterr()
    assert said.out == ""
    assert said.err.splitlines() == [f"invperm sweep: error: grid {path}: train.device: "
                                     f"device = 'cuda' {WHY}"]  # a configuration error: no rerun advice
    assert not out.exists()


def test_the_refusal_names_the_variant_that_asks_for_cuda(tmp_path):
    path = _grid(tmp_path, VARIANTS)
    with pytest.raises(ValueError) as err:
        load_grid(path, executor="slurm")
    assert str(err.value) == f"grid {path}: variants[1].train.device: device = 'cuda:1' {WHY}"


def test_cuda_is_accepted_with_slurm_gpus_and_on_the_other_executors(tmp_path):
    assert load_grid(_grid(tmp_path, GRID.format(device="cuda", gpus="gpus = 1")), executor="slurm")
    cuda = _grid(tmp_path, GRID.format(device="cuda", gpus=""))
    for executor in ("local", "debug", None):  # a local machine's own GPU decides there
        assert load_grid(cuda, executor=executor).jobs[0].train_cfg.device == "cuda"
    assert load_grid(_grid(tmp_path, GRID.format(device="auto", gpus="")), executor="slurm")


def test_the_dry_run_refuses_it_too_and_gpus_0_is_no_gpu(tmp_path, capsys):
    """``--dry-run --executor slurm`` checks the grid as the sweep would (it said "1 GPU bucket");
    ``gpus = 0`` is a valid count (it was refused as not an integer) and asks for no GPU."""
    path = _grid(tmp_path, GRID.format(device="cuda", gpus=""))
    assert main(["sweep", str(path), "--executor", "slurm", "--dry-run"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(WHY)
    zero = _grid(tmp_path, GRID.format(device="cuda", gpus="gpus = 0"))
    with pytest.raises(ValueError, match="needs \\[slurm\\] gpus = N"):
        load_grid(zero, executor="slurm")
    assert load_grid(_grid(tmp_path, GRID.format(device="auto", gpus="gpus = 0")), executor="slurm")
