"""Every malformed input a user could give, through the public API and the command line.

Each case asserts the exception type (``ValueError`` for bad arguments, as the project does
everywhere) and a message naming the argument. The command line turns each into one line on stderr
and exit status 2, never a traceback. Cases test_task/test_model/test_train/test_constructions
already hold (duplicate rows in ``P``, ``Y_P`` of the wrong shape, NaN in ``X``, β = 0, …) are not
repeated here.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from invperm_interp import (
    Batch,
    HookedDisentangledTransformer,
    Layout,
    ModelConfig,
    make_input,
    sample_batch,
)
from invperm_interp.analysis.templates import explain
from invperm_interp.cli import main
from invperm_interp.cli.main import build_parser
from invperm_interp.config import TrainConfig
from invperm_interp.maths import constructions as C
from invperm_interp.maths.floors import causal_floor, dependency_map, exact_floor_enumeration
from invperm_interp.runs.checkpoint import load_model_tensors, model_tensors
from invperm_interp.training.metrics import evaluate
from invperm_interp.training.run import Run
from invperm_interp.training.single import resume, train

NAN, INF = float("nan"), float("inf")


def perm_matrix(*perm):
    return torch.eye(len(perm))[list(perm)]


# -- P: not a permutation ---------------------------------------------------------------------
@pytest.mark.parametrize("P, match", [
    (torch.tensor([[NAN, 0.0], [0, 1]]), "P must contain only 0 and 1"),
    (torch.tensor([[INF, 0.0], [0, 1]]), "P must contain only 0 and 1"),
    (torch.tensor([[-1.0, 0], [0, 1]]), "P must contain only 0 and 1"),
    (torch.zeros(2, 2), "P must be a permutation matrix: every row and column"),  # a zero row
    (torch.ones(2, 2), "P must be a permutation matrix"),  # binary, rows sum to 2
    (torch.stack([torch.eye(2), torch.tensor([[0.0, 1], [0, 1]])]),  # one bad sample in a batch
     "P must be a permutation matrix"),
    (torch.eye(2).T[None, None], r"P must have shape \(B, 2, 2\), got \(1, 1, 2, 2\)"),
    (torch.zeros(1, 2, 3), r"P must have shape \(B, 2, 2\), got \(1, 2, 3\)"),
    (torch.ones(2), r"P must have shape \(B, 2, 2\), got \(2,\)"),
    (torch.eye(2, dtype=torch.complex128), "P must be real, got dtype torch.complex128"),
    (None, "P must be a torch.Tensor, got NoneType"),
])
def test_not_a_permutation(P, match):
    with pytest.raises(ValueError, match=match):
        make_input(Layout.plain(2), P, torch.zeros(2, 2))


def test_integer_and_bool_inputs_are_taken_as_float32():
    """Integer and bool 0/1 matrices are valid input (argmax has no bool kernel: this raised a
    RuntimeError before); the batch is float32 like sample_batch's."""
    P, Y = perm_matrix(2, 0, 1), torch.tensor([[1.0, 0, 1], [0, 0, 1], [1, 1, 0]])
    want = make_input(Layout.plain(3), P, P @ Y)
    for dtype in (torch.bool, torch.uint8, torch.int64, torch.uint16):
        got = make_input(Layout.plain(3), P.to(dtype), (P @ Y).to(dtype))
        assert got.X.dtype == torch.float32, dtype
        assert torch.equal(got.X, want.X) and torch.equal(got.Y, want.Y), dtype
        assert torch.equal(got.perm, torch.tensor([[2, 0, 1]])), dtype


# -- Y_P: not matching d, not finite, not real ------------------------------------------------
@pytest.mark.parametrize("Y_P, match", [
    (torch.zeros(3, 2, 2), r"Y_P must have shape \(2, 2, 2\) like P, got \(3, 2, 2\)"),
    (torch.zeros(2, 2), r"Y_P must have shape \(2, 2, 2\) like P, got \(1, 2, 2\)"),
    (torch.zeros(2, 2, 3), r"Y_P must have shape \(2, 2, 2\) like P"),
    ([[0, 1], [1, 0]], "Y_P must be a torch.Tensor, got list"),
])
def test_Y_P_not_matching_P(Y_P, match):
    with pytest.raises(ValueError, match=match):
        make_input(Layout.plain(2), torch.eye(2).expand(2, 2, 2), Y_P)


@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_non_finite_Y_P_refused_even_for_real_targets(value):
    Y_P = torch.tensor([[0.5, value], [1.0, -2.0]])
    with pytest.raises(ValueError, match=r"Y_P must be finite \(no NaN or inf\)"):
        make_input(Layout.plain(2), torch.eye(2), Y_P, binary=False)


# -- dtypes -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64, "float32", None])
def test_sample_batch_needs_a_float_dtype(dtype):
    """An integer dtype used to give an integer X that only the model refused, later."""
    with pytest.raises(ValueError, match=f"dtype must be a floating-point torch.dtype, got {dtype!r}"):
        sample_batch(Layout.plain(2), 2, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.bool, torch.int32])
def test_model_refuses_integer_and_complex_X(dtype):
    model = HookedDisentangledTransformer(ModelConfig(Layout.plain(2)))
    with pytest.raises(ValueError, match=f"X must be a floating-point tensor, got dtype {dtype}"):
        model(torch.zeros(1, 4, 2, dtype=dtype))


@pytest.mark.parametrize("dtype, match", [
    (torch.int64, "dtype must be torch.float32 or torch.float64"),
    (torch.complex64, "dtype must be torch.float32 or torch.float64"),
])
def test_construction_refuses_integer_and_complex_dtype(dtype, match):
    with pytest.raises(ValueError, match=match):
        C.build("theorem2", 3, dtype=dtype)


# -- d, n_scratch, scratch --------------------------------------------------------------------
@pytest.mark.parametrize("build", [
    lambda: Layout.scratch(0),
    lambda: Layout.of(0, "P", "Y"),
    lambda: Layout.plain(2.0),
    lambda: Layout.plain(True),
    lambda: Layout.plain("3"),
    lambda: C.build("theorem2", 0),
    lambda: C.build("theorem3", -2),
    lambda: ModelConfig.from_dict({"layout": {"d": 0, "segments": [["P", "P", 0], ["Y", "Y", 0]]}}),
])
def test_d_must_be_a_positive_integer(build):
    with pytest.raises(ValueError, match="d must be an integer >= 1"):
        build()


@pytest.mark.parametrize("build, match", [
    (lambda: Layout.scratch(3, 2.5), "n_scratch must be an integer >= 1, got 2.5"),
    (lambda: Layout.scratch(3, True), "n_scratch must be an integer >= 1, got True"),
    (lambda: Layout.of(3, "P", "Y", "S:0"), r"segment spec 'S:0': n_rows must be >= 1, got 0"),
    (lambda: Layout.of(3, "P", "Y", "S:-2"), r"segment spec 'S:-2': n_rows must be >= 1, got -2"),
    # these three raised TypeError or Python's "could not convert string to float" before
    (lambda: Layout.scratch(2, scratch=torch.tensor([1j, 0])), "scratch must be a vector of d=2 real"),
    (lambda: Layout.scratch(2, scratch="ab"), "scratch must be a vector of d=2 real numbers, got 'ab'"),
    (lambda: Layout.scratch(2, scratch=3.0), "scratch must be a vector of d=2 real numbers, got 3.0"),
    (lambda: Layout.scratch(2, scratch=[INF, 0.0]), "scratch must be finite"),
    (lambda: Layout.scratch(2, scratch=torch.ones(2, 2)), "scratch must be a vector of length d=2"),
])
def test_bad_scratch_rows(build, match):
    with pytest.raises(ValueError, match=match):
        build()


@pytest.mark.parametrize("data", [
    {"d": 2},
    {"d": 2, "segments": [["P", "P"], ["Y", "Y", 2]]},
    {"d": "two", "segments": [["P", "P", 2], ["Y", "Y", 2]]},
    {"d": 2, "segments": [["P", "P", 2], ["Y", "Y", 2]], "scratch": 5},
    [2, "P", "Y"],
])
def test_malformed_layout_json_names_what_a_layout_dict_holds(data):
    with pytest.raises(ValueError, match=r"layout dict must have 'd' \(an integer\), 'segments'"):
        Layout.from_dict(data)


# -- read-out segment missing from the layout -------------------------------------------------
@pytest.mark.parametrize("call, match", [
    (lambda: ModelConfig(Layout.plain(3), readout="S"),
     r"readout must name a segment of the layout \['P', 'Y'\], got 'S'"),
    (lambda: ModelConfig(Layout.of(3, "0:2", "P", "Y"), readout="pad"),
     "readout segment 'pad' must have d=3 rows"),
    (lambda: causal_floor(Layout.plain(3), "S"), r"segment name must be one of \['P', 'Y'\], got 'S'"),
    (lambda: exact_floor_enumeration(Layout.scratch(2), "T"), "segment name must be one of"),
    (lambda: Layout.plain(3).rows("S"), "segment name must be one of"),
    (lambda: ModelConfig.from_dict({"layout": Layout.plain(2).to_dict(), "readout": "S"}),
     "readout must name a segment"),
])
def test_readout_segment_missing(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("make, match", [
    (lambda: ModelConfig(Layout.plain(3), init_scale="big"), "init_scale must be finite and >= 0"),
    (lambda: ModelConfig(Layout.plain(3), init_scale=INF), "init_scale must be finite and >= 0"),
    (lambda: ModelConfig(Layout.plain(3), n_layers=2.0), "n_layers must be an integer >= 1"),
    (lambda: ModelConfig(Layout.plain(3), n_heads=(1, -1)), "n_heads must be integers >= 1"),
    (lambda: ModelConfig(Layout.plain(3), dtype=torch.float32), "dtype must be one of"),
    (lambda: ModelConfig("plain"), "layout must be a Layout, got str"),
    (lambda: ModelConfig.from_dict({"layout": Layout.plain(2).to_dict(), "heads": 2}),
     r"unknown keys \['heads'\]"),
    (lambda: HookedDisentangledTransformer({"d": 3}), "cfg must be a ModelConfig, got dict"),
])
def test_bad_model_config(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# -- constructions: β and names ---------------------------------------------------------------
@pytest.mark.parametrize("beta", [-1.0, -1e-12, NAN, -INF, True, "100", 1j])
def test_beta_must_be_positive_and_finite(beta):
    """``True`` was taken as β = 1 before (bool is an int in Python)."""
    with pytest.raises(ValueError, match=f"beta must be a finite number > 0, got {beta!r}"):
        C.build("theorem2", 3, beta)


@pytest.mark.parametrize("name", ["Theorem2", "theorem_2", "", None])
def test_unknown_construction_lists_the_known_ones(name):
    with pytest.raises(ValueError, match=r"construction name must be one of \['theorem2_as_printed'"):
        C.build(name, 3)


def test_verify_and_dependency_map_check_their_batch():
    model = C.theorem2(3)
    wrong = sample_batch(Layout.scratch(3), 2, dtype=torch.float64)  # T = 9, the model reads 6
    with pytest.raises(ValueError, match=r"X must have shape \(B, 6, 3\) for layout"):
        C.verify(model, batch=wrong)
    with pytest.raises(ValueError, match=r"X must have shape \(B, 6, 3\)"):
        dependency_map(model, wrong)
    with pytest.raises(ValueError, match="n must be an integer >= 1, got 0"):
        C.verify(model, n=0)


@pytest.mark.parametrize("call", [
    lambda m, b: C.verify(m, batch=b),
    lambda m, b: evaluate(m, b),
    lambda m, b: dependency_map(m, b),
    lambda m, b: m(b.X),
])
def test_an_empty_batch_is_refused(call):
    """Every use reduces over the batch (a max, an MSE, a Jacobian norm): zero samples raised
    RuntimeError, ZeroDivisionError or IndexError before."""
    model = C.theorem2(3)
    full = sample_batch(Layout.plain(3), 2, dtype=torch.float64)
    empty = Batch(full.layout, *(t[:0] for t in (full.X, full.P, full.Y, full.Y_P, full.perm)))
    with pytest.raises(ValueError, match="at least one sample"):
        call(model, empty)


@pytest.mark.parametrize("layer, head", [(True, None), (False, None), (0, True), (1.0, None)])
def test_layer_and_head_must_be_integers_not_bools(layer, head):
    with pytest.raises(ValueError, match=r"(layer|head) must be an integer in \[0, \d\] or None"):
        explain(C.theorem2(3), layer=layer, head=head)


# -- numbers in JSON configs ------------------------------------------------------------------
@pytest.mark.parametrize("edit, match", [
    (lambda m: m["layout"].update(d=1e999), r"d must be an integer >= 1, got inf"),
    (lambda m: m["layout"].update(d=4.9), r"d must be an integer >= 1, got 4.9"),  # was stored as 4
    (lambda m: m["layout"].update(d=3.0), r"d must be an integer >= 1, got 3.0"),
    (lambda m: m["layout"].update(d="3"), r"d must be an integer >= 1, got '3'"),
    (lambda m: m["layout"]["segments"][0].__setitem__(2, 2.5), "must have an integer n_rows >= 1, got 2.5"),
    (lambda m: m["layout"]["segments"][0].__setitem__(2, 1e999), "n_rows >= 1, got inf"),
    (lambda m: m["layout"].update(scratch=["1", 2]), "'scratch' must be a list of numbers"),
    (lambda m: m.update(n_layers=1e999), "n_layers must be an integer >= 1, got inf"),
    (lambda m: m.update(init_scale=1e999), "init_scale must be finite"),
])
def test_config_numbers_are_taken_as_written(edit, match):
    data = ModelConfig(Layout.scratch(3), readout="S").to_dict()
    edit(data)
    with pytest.raises(ValueError, match=match):
        ModelConfig.from_json(json.dumps(data))


@pytest.mark.parametrize("key, value, match", [
    ("steps", 1e999, "steps must be an integer >= 1, got inf"),
    ("steps", 10.5, "steps must be an integer >= 1, got 10.5"),
    ("lr", 1e999, "lr must be a finite number > 0"),
    ("batch_size", 8.0, "batch_size must be an integer >= 1, got 8.0"),
])
def test_train_config_numbers_are_taken_as_written(key, value, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig.from_json(json.dumps({key: value}))


# -- runs on disk: missing, or a config that disagrees with its weights -----------------------
def small_cfgs(tmp_path, **kw):
    model_cfg = ModelConfig(Layout.plain(2), attention_dir="bidirectional")
    args = dict(steps=4, batch_size=8, eval_every=2, eval_size=16, checkpoint_every=2, device="cpu",
                out_dir=str(tmp_path / "run"))
    args.update(kw)
    return model_cfg, TrainConfig(**args)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("finished")
    model_cfg, train_cfg = small_cfgs(tmp)
    train(model_cfg, train_cfg, progress=False)
    return tmp / "run"


def copy_run(src, dst):
    dst.mkdir()
    for p in src.rglob("*"):
        if p.is_file():
            target = dst / p.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(p.read_bytes())
    return dst


@pytest.mark.parametrize("call", [
    lambda d: Run.load(d),
    lambda d: HookedDisentangledTransformer.from_run(d),
    lambda d: HookedDisentangledTransformer.from_run(str(d), step=2),
    lambda d: resume(d, progress=False),
])
def test_run_directory_that_does_not_exist(tmp_path, call):
    missing = tmp_path / "no_such_run"
    match = rf"run_dir must hold a run \(config.json\), found none at {re.escape(str(missing))}"
    with pytest.raises(ValueError, match=match):
        call(missing)
    assert not missing.exists()  # nothing created on the way


@pytest.mark.parametrize("edit, match_load, match_resume", [
    (lambda c: c["model"].update(n_layers=3), "written by another configuration", "belongs to another run"),
    (lambda c: c["model"].update(attention_dir="causal"), "written by another configuration",
     "belongs to another run"),
    (lambda c: c["train"].update(seed=7), "written by another configuration", "belongs to another run"),
])
def test_config_json_edited_after_training(finished_run, tmp_path, edit, match_load, match_resume):
    """A run whose config.json no longer describes its weights: refused when loading (final or
    a checkpoint) and when resuming, and nothing is written."""
    d = copy_run(finished_run, tmp_path / "edited")
    config = json.loads((d / "config.json").read_text())
    edit(config)
    (d / "config.json").write_text(json.dumps(config))
    before = {p: p.read_bytes() for p in d.rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match=f"final.safetensors was {match_load} than {d}/config.json"):
        Run.load(d)
    with pytest.raises(ValueError, match=f"step_2.safetensors was {match_load}"):
        HookedDisentangledTransformer.from_run(d, step=2)
    with pytest.raises(ValueError, match=match_resume):
        resume(d, steps=6, progress=False)
    assert {p: p.read_bytes() for p in d.rglob("*") if p.is_file()} == before


def test_weights_of_another_shape_are_refused_by_name():
    small = HookedDisentangledTransformer(ModelConfig(Layout.plain(2), n_layers=2))
    deep = HookedDisentangledTransformer(ModelConfig(Layout.plain(2), n_layers=3))
    with pytest.raises(ValueError, match=r"does not fit the model: missing weights \['blocks.2.attn.A'\]"):
        load_model_tensors(deep, model_tensors(small), "x.safetensors")
    wide = HookedDisentangledTransformer(ModelConfig(Layout.plain(3), n_layers=2))
    with pytest.raises(ValueError, match=r"weight blocks.0.attn.A has shape \(1, 10, 10\)"):
        load_model_tensors(wide, model_tensors(HookedDisentangledTransformer(
            ModelConfig(Layout.of(3, "P", "Y", "0:1"), n_layers=2))), "x.safetensors")


def test_resume_a_run_that_is_not_there_or_without_out_dir(tmp_path):
    model_cfg, train_cfg = small_cfgs(tmp_path, out_dir=None)
    with pytest.raises(ValueError, match="resume=True needs train_cfg.out_dir"):
        train(model_cfg, train_cfg, resume=True, progress=False)
    with pytest.raises(ValueError, match="run_dir must hold a run"):
        train(model_cfg, TrainConfig(**{**train_cfg.to_dict(), "out_dir": str(tmp_path / "x")}),
              resume=True, progress=False)
    assert not (tmp_path / "x").exists()


# -- the command line, in process -------------------------------------------------------------
def cli_error(argv, capsys):
    """Run ``invperm argv``; return its single stderr line after checking the exit status."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"invperm {argv[0]}: error: "), err
    return lines[0]


@pytest.mark.parametrize("argv, match", [
    (["train", "--d", "0"], "d must be an integer >= 1, got 0"),
    (["train", "--d", "-3", "--out", "{tmp}/r"], "d must be an integer >= 1, got -3"),
    (["train", "--layout", "scratch", "--n-scratch", "0", "--out", "{tmp}/r"],
     "n_scratch must be an integer >= 1, got 0"),
    (["train", "--layout", "scratch", "--n-scratch", "-1", "--out", "{tmp}/r"],
     "n_scratch must be an integer >= 1, got -1"),
    (["train", "--readout", "S", "--out", "{tmp}/r"], "readout must name a segment of the layout"),
    (["train", "--layout", "scratch", "--d", "3", "--n-scratch", "2", "--readout", "S", "--out",
      "{tmp}/r"], "readout segment 'S' must have d=3 rows"),
    (["train", "--heads", "0", "--out", "{tmp}/r"], "n_heads must be integers >= 1"),
    (["train", "--layers", "0", "--out", "{tmp}/r"], "n_layers must be an integer >= 1"),
    (["train", "--lr", "-1", "--out", "{tmp}/r"], "lr must be a finite number > 0"),
    (["train", "--lr", "inf", "--out", "{tmp}/r"], "lr must be a finite number > 0"),
    (["train", "--steps", "0", "--out", "{tmp}/r"], "steps must be an integer >= 1"),
    (["train", "--batch-size", "0", "--out", "{tmp}/r"], "batch_size must be an integer >= 1"),
    (["train", "--eval-every", "0", "--out", "{tmp}/r"], "eval_every must be an integer >= 1"),
    (["train", "--device", "gpu", "--out", "{tmp}/r"], "device must be 'auto', 'cpu'"),
    (["train", "--recipe", "paper", "--lr", "0.1", "--out", "{tmp}/r"], "fixes lr=1.0"),
    (["train", "--d", "2"], "--out DIR is required"),
    (["train", "--resume", "{tmp}/missing"], r"run_dir must hold a run \(config.json\), found none"),
    (["train", "--resume", "{tmp}/missing", "--d", "3"], "--resume DIR takes only --steps"),
    (["train", "--config", "{tmp}/missing.json", "--out", "{tmp}/r"], "No such file or directory"),
    (["train", "--config", "{tmp}", "--out", "{tmp}/r"], "Is a directory"),  # a traceback before
    (["train", "--config", "{tmp}/garbage.json", "--out", "{tmp}/r"], "--config .* is not JSON"),
    (["train", "--config", "{tmp}/list.json", "--out", "{tmp}/r"], "--config must be a JSON object"),
    (["train", "--config", "{tmp}/badtrain.json", "--out", "{tmp}/r"], "'train' must be a JSON object"),
    (["train", "--config", "{tmp}/badmodel.json", "--out", "{tmp}/r"], "readout must name a segment"),
    (["train", "--d", "2", "--out", "{tmp}/afile/run"], "out_dir .*afile/run cannot be written"),
    (["train", "--d", "4", "--steps", "20", "--layers", "50", "--out", "{tmp}/r"],  # a traceback
     r"this training run needs about \S+ GB .* lower d, n_layers or n_heads"),  # from the estimate
    (["train", "--arch", "standard", "--d-model", str(2**62), "--out", "{tmp}/r"],  # a traceback:
     r"this training run needs about \S+ GB .* lower d_model"),  # torch cannot size its tensors
    (["train", "--n-scratch", "3", "--out", "{tmp}/r"], "--n-scratch sets the scratch rows of "
                                                         "--layout scratch"),
    (["train", "--config", "{tmp}/hugemodel.json", "--out", "{tmp}/r"], "d must be an integer >= 1, got inf"),
    (["train", "--config", "{tmp}/fractional.json", "--out", "{tmp}/r"], "d must be an integer >= 1, "
                                                                          "got 4.9"),
    (["construct", "nope"], "construction name must be one of"),
    (["construct", "theorem2", "--beta", "-1"], "beta must be a finite number > 0, got -1.0"),
    (["construct", "theorem2", "--beta", "nan"], "beta must be a finite number > 0, got nan"),
    (["construct", "theorem2", "--d", "0"], "d must be an integer >= 1, got 0"),
    (["construct", "theorem2", "--n", "0"], "n must be an integer >= 1, got 0"),
    (["analyze", "{tmp}/missing"], "missing.* (does not exist|found none)"),
    (["analyze", "--construction", "nope"], "construction name must be one of"),
    (["analyze", "--construction", "theorem2", "--beta", "-5"], "beta must be a finite number > 0"),
    (["analyze", "--construction", "theorem2", "--d", "3", "--beta", "1e308"],  # construct takes it
     "weights are too large to analyze .* pass beta <= 1e150"),
    (["analyze"], "give a run directory or --construction"),
])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, match):
    (tmp_path / "garbage.json").write_text("{model: P")
    (tmp_path / "list.json").write_text("[1, 2]")
    model = ModelConfig(Layout.plain(2)).to_dict()
    (tmp_path / "badtrain.json").write_text(json.dumps({"model": model, "train": [1]}))
    (tmp_path / "badmodel.json").write_text(json.dumps({"model": {**model, "readout": "S"}}))
    (tmp_path / "afile").write_text("a file, not a directory")
    for name, d in (("hugemodel", "1e999"), ("fractional", "4.9")):  # as a user writes JSON
        text = json.dumps({"model": model}).replace('"d": 2', f'"d": {d}')
        (tmp_path / f"{name}.json").write_text(text)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    line = cli_error(argv, capsys)
    assert re.search(match, line), line
    assert not (tmp_path / "r").exists()  # refused before anything was written


def test_cli_analyze_run_whose_config_disagrees(finished_run, tmp_path, capsys):
    d = copy_run(finished_run, tmp_path / "edited")
    config = json.loads((d / "config.json").read_text())
    config["model"]["n_layers"] = 3
    (d / "config.json").write_text(json.dumps(config))
    assert "written by another configuration" in cli_error(["analyze", str(d)], capsys)
    assert "belongs to another run" in cli_error(["train", "--resume", str(d), "--no-progress"],
                                                 capsys)


def test_cli_argparse_errors_end_in_one_readable_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--d", "abc"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "invperm train: error: argument --d: invalid int value: 'abc'"


# -- the command line, as a user runs it ------------------------------------------------------
def test_console_script_prints_one_line_not_a_traceback(tmp_path):
    """The installed ``invperm`` (or ``python -m invperm_interp.cli``), run as a user would: exit
    status 2 and a single stderr line. Started together: each pays ~3 s of imports."""
    script = Path(sys.executable).with_name("invperm")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "invperm_interp.cli"]
    cases = {
        "train --d 0 --out {tmp}/r": "invperm train: error: d must be an integer >= 1, got 0",
        "analyze {tmp}/nonexistent": "invperm analyze: error: ",
        "train --config {tmp} --out {tmp}/r": "invperm train: error: [Errno 21] Is a directory",
    }
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = {}
    for case in cases:
        argv = case.replace("{tmp}", str(tmp_path)).split()
        procs[case] = subprocess.Popen(command + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, env=env)
    for case, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (case, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, (case, err)
        assert err.startswith(cases[case]), (case, err)
    assert not (tmp_path / "r").exists() and not (tmp_path / "nonexistent").exists()


@pytest.mark.parametrize("command", ["analyze", "timeline"])
def test_an_output_folder_that_cannot_be_written_is_refused_before_the_analysis(
        finished_run, tmp_path, capsys, monkeypatch, command):
    """``--out`` below a file (what a read-only folder gives root, who ignores permissions, is
    the same OSError): one line naming the folder, and nothing analysed first."""
    import importlib

    record = importlib.import_module("invperm_interp.analysis.record")
    timeline = importlib.import_module("invperm_interp.analysis.timeline")

    def analysed(*args, **kw):
        raise AssertionError("analysed before the output folder was checked")

    monkeypatch.setattr(record, "analyze", analysed)
    monkeypatch.setattr(timeline, "timeline", analysed)
    blocked = tmp_path / "a file"
    blocked.write_text("")
    line = cli_error([command, str(finished_run), "--n", "16", "--out", str(blocked / "out")],
                     capsys)
    assert line.endswith(f"{blocked / 'out'} cannot be written (Not a directory); write "
                         + ("the record and report" if command == "analyze" else "them")
                         + " elsewhere with --out"), line


# -- one bound for every --seed and --threads -------------------------------------------------
def argparse_error(argv, capsys) -> str:
    """Run ``invperm argv``, which argparse refuses: its last stderr line (after the usage)."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


SEEDED = [["demo", "--out", "{tmp}/r"], ["construct", "theorem2", "--d", "3"],
          ["train", "--out", "{tmp}/r"], ["analyze", "{run}"], ["report", "{run}"],
          ["analyze", "--construction", "theorem2", "--d", "3"], ["timeline", "{run}"],
          ["discover", "{run}"]]


@pytest.mark.parametrize("argv", SEEDED, ids=lambda a: " ".join(a[:2]))
def test_every_seed_has_one_bound_and_one_message(finished_run, tmp_path, capsys, argv):
    """``--seed`` is an integer in [0, 2^62) on every subcommand (a run seeds its streams 4s,
    4s + 1, 4s + 2); outside it, argparse's one line, before anything runs or is written."""
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{run}", str(finished_run)) for a in argv]
    for seed in (-1, 2**62, 2**63, 2**64):
        line = argparse_error(argv + ["--seed", str(seed)], capsys)
        assert line == (f"invperm {argv[0]}: error: argument --seed: seed must be an integer in "
                        f"[0, 2^62), got {seed}"), line
    assert build_parser().parse_args(argv + ["--seed", str(2**62 - 1)]).seed == 2**62 - 1
    assert not (tmp_path / "r").exists()


THREADED = [["demo", "--out", "{tmp}/r"], ["train", "--d", "3", "--steps", "2", "--out", "{tmp}/r"],
            ["analyze", "{run}"], ["report", "{run}"], ["timeline", "{run}"], ["discover", "{run}"]]


@pytest.mark.parametrize("argv", THREADED, ids=lambda a: a[0])
def test_every_threads_has_one_bound_and_no_thread_is_started_past_it(
        finished_run, tmp_path, capsys, monkeypatch, argv):
    """``--threads 100000`` crashed the process in libgomp (a segfault); now every subcommand that
    takes ``--threads`` refuses it in one line, before torch is asked for a thread."""
    asked = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: asked.append(n))
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{run}", str(finished_run)) for a in argv]
    for threads in (0, 100000):
        line = argparse_error(argv + ["--threads", str(threads)], capsys)
        assert line == (f"invperm {argv[0]}: error: argument --threads: threads must be an integer "
                        f"in [1, 1024], got {threads}"), line
    assert asked == [] and not (tmp_path / "r").exists()
    assert build_parser().parse_args(argv + ["--threads", "1024"]).threads == 1024


@pytest.mark.parametrize("command", ["timeline", "discover"])
def test_an_analysis_past_the_memory_is_refused_from_n_before_any_sample(
        finished_run, capsys, monkeypatch, command):
    """``--n 3000000000`` allocated gigabytes before running out of memory; now the analysis's
    estimate refuses it first, as ``analyze`` does, naming ``--n``."""
    import importlib

    def analysed(*args, **kw):
        raise AssertionError("analysed before the memory check")

    monkeypatch.setattr(importlib.import_module("invperm_interp.analysis.timeline"), "timeline",
                        analysed)
    monkeypatch.setattr(importlib.import_module("invperm_interp.analysis.discover"), "discover",
                        analysed)
    where = str(finished_run if command == "timeline" else finished_run.parent)  # a folder of runs
    line = cli_error([command, where, "--n", "3000000000"], capsys)
    assert re.search(r"the analysis on n=3000000000 samples needs about \S+ GB .* lower the number "
                     r"of samples \(--n\)", line), line
    line = cli_error([command, where, "--n", "100000", "--max-memory", "1M"], capsys)
    assert "(max_memory)" in line and "--n" in line, line
