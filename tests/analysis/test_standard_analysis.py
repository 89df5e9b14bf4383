"""Standard runs analysed through the exact map: analyze, invperm analyze and its report, the
timeline and the sweep's analysis; LayerNorm or MLPs refuse the mechanism in one line."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from helpers import run, small

from invperm_interp.analysis.record import ModelAnalysis, analyze
from invperm_interp.analysis.timeline import timeline
from invperm_interp.cli.main import main
from invperm_interp.runs.directory import RunDir
from invperm_interp.sweep.tasks import write_analysis
from invperm_interp.task import sample_batch
from invperm_interp.training.run import Run


@pytest.fixture(scope="module")
def standard_run(tmp_path_factory):
    """A short bidirectional standard run at d = 3 with a checkpoint every 10 steps."""
    out = tmp_path_factory.mktemp("standard") / "run"
    model_cfg, train_cfg = small(d=3, steps=30, batch_size=64, eval_every=10, checkpoint_every=10,
                                 out_dir=str(out))
    run(replace(model_cfg, arch="standard", init_scale=None, d_model=8, d_head=4), train_cfg)
    return out


def test_analyze_reads_a_standard_model_through_its_map(standard_run):
    model = Run.load(standard_run).model
    batch = sample_batch(model.cfg.layout, 256, torch.Generator().manual_seed(0))
    record = analyze(model, batch, "standard")
    with torch.no_grad():  # the standard model's own forward and the note's loss, written here
        own = ((model.direct(batch.X) - batch.Y) ** 2).sum(-1).mean().item()
    assert record.model.arch == "disentangled" and record.model.widths == model.cfg.widths
    assert abs(record.mse - own) <= 1e-5 * max(1.0, own)
    std = record.through_map
    assert std["model"]["d_model"] == 8 and std["model"]["d_head"] == 4
    assert [len(layer) for layer in std["ov_spectra"]] == [1, 1]
    assert all(r <= 4 for layer in std["ov_rank"] for r in layer)
    again = ModelAnalysis.from_json(record.to_json())
    assert again.through_map == json.loads(json.dumps(std))


@pytest.mark.slow  # the report page takes seconds
def test_invperm_analyze_reports_a_standard_run_and_its_ov_spectra(standard_run, capsys):
    assert main(["analyze", str(standard_run), "--n", "256"]) == 0
    shown = capsys.readouterr().out
    assert "analysed exactly through its map to the disentangled model" in shown
    record = json.loads(RunDir(standard_run).analysis.read_text())
    assert record["through_map"]["model"]["arch"] == "standard"
    page = RunDir(standard_run).report.read_text()
    assert "A standard transformer" in page and "rank of W_OV" in page


def test_the_timeline_and_the_sweep_analyse_a_standard_run(standard_run):
    found = timeline(standard_run, n=128)
    assert [s.step for s in found.steps] == [10, 20, 30]
    record = write_analysis(standard_run, samples=256)
    assert record.samples == 256 and record.answer.verdict in ("faithful", "borderline", "none")


@pytest.mark.parametrize("kw,words", [({"layernorm": True}, "without LayerNorm"),
                                      ({"d_mlp": 4}, "attention-only")])
def test_layernorm_or_mlps_refuse_the_mechanism_in_one_line_and_keep_the_behaviour(
        tmp_path, capsys, kw, words):
    out = tmp_path / "run"
    model_cfg, train_cfg = small(d=3, attention_dir="causal", steps=4, out_dir=str(out))
    run(replace(model_cfg, arch="standard", init_scale=None, d_model=8, **kw), train_cfg)
    model = Run.load(out).model
    with pytest.raises(ValueError, match=words) as err:
        analyze(model, sample_batch(model.cfg.layout, 8, torch.Generator().manual_seed(0)))
    assert "\n" not in str(err.value)
    assert main(["analyze", str(out), "--n", "64"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert "causal floor 0.75" in shown[0] and "the same weights bidirectional: MSE" in shown[0]
    assert shown[1].startswith("mechanism analysis refused:") and words in shown[1]
