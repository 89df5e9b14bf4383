"""analyses/minimal_under_mean.py: minimal circuits and the final layer alone under mean ablation,
the final layer alone checked against a plain einsum forward with the first layer's scores set
to zero, to their mean over the reference samples or to each sample's resample reference's."""

import json

import pytest
import torch
from helpers import analyses_script, tiny_grid_text

from invperm_interp.analysis.verdict import evaluation_batch
from invperm_interp.sweep.engine import run_sweep
from invperm_interp.sweep.tasks import reference_batch
from invperm_interp.training.run import Run


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A tiny sweep of two 2-layer models (d = 3, 30 steps), analysed for real with mean ablation
    on 64 samples, its records marked solved (the script reads solved runs only)."""
    tmp = tmp_path_factory.mktemp("mum")
    grid = tmp / "grid.toml"
    grid.write_text(tiny_grid_text(seeds="2", d="3", steps=30, every=30, head=(
        'solve_mse = 1e-12\nmechanism = {samples = 64, seed = 7, mean_ablation = true}')))
    out = tmp / "sweep"
    run_sweep(grid, out, executor="debug", progress=False)
    lines = [json.loads(x) for x in (out / "sweep.jsonl").read_text().splitlines()]
    for line in lines:
        line["steps_to_solve"] = line["step"]
    (out / "sweep.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return out


def _einsum_forward(model, X, first_scores=None):
    """The disentangled forward in plain einsums: ``h⁰ = [X, I]``, scores ``h A hᵀ`` (the first
    layer's replaced by ``first_scores (H, T, T)`` when given), softmax, the stream concatenated;
    the read-out rows of ``h^L W_U``."""
    cfg = model.cfg
    B, T, _ = X.shape
    h = torch.cat([X.double(), torch.eye(T, dtype=torch.float64).expand(B, T, T)], -1)
    for layer, block in enumerate(model.blocks):
        A = block.attn.A.detach().double()  # (H, D, D)
        scores = torch.einsum("btd,hde,bse->bhts", h, A, h)
        if layer == 0 and first_scores is not None:
            scores = first_scores.expand_as(scores)
        if cfg.causal:
            scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        pattern = scores.softmax(-1)
        h = torch.cat([h, *torch.einsum("bhts,bsd->hbtd", pattern, h)], -1)
    return h[:, cfg.readout_rows] @ model.unembed.W_U.detach().double()


def test_final_layer_alone_matches_an_einsum_forward_and_the_script_resumes(swept, tmp_path, monkeypatch,
                                                                            capsys):
    script = analyses_script(monkeypatch, "minimal_under_mean")
    out = tmp_path / "mum.json"
    script.main([str(swept), "--prefix", "", "--out", str(out)])
    result = json.loads(out.read_text())
    assert [r["run"] for r in result["runs"]] == ["seed0", "seed1"]
    for run in result["runs"]:
        model = Run.load(swept / run["run"]).analysis_model
        batch = evaluation_batch(model, 64, 7)
        reference = reference_batch("mean", model, 64, 7 + 1)
        own = float(((_einsum_forward(model, batch.X) - batch.Y.double()) ** 2).sum(-1).mean())
        h0 = torch.cat([reference.X.double(), torch.eye(model.cfg.T, dtype=torch.float64)
                        .expand(len(reference), -1, -1)], -1)
        A0 = model.blocks[0].attn.A.detach().double()
        means = torch.einsum("btd,hde,bse->hts", h0, A0, h0) / len(reference)
        other = reference_batch("resample", model, 64, 7 + 1)  # sample i takes other sample i's
        h_other = torch.cat([other.X.double(), torch.eye(model.cfg.T, dtype=torch.float64)
                             .expand(len(other), -1, -1)], -1)
        resampled = torch.einsum("btd,hde,bse->bhts", h_other, A0, h_other)
        for style, first in (("zero", torch.zeros_like(means)), ("mean", means),
                             ("resample", resampled)):
            out_ = _einsum_forward(model, batch.X, first)
            mse = float(((out_ - batch.Y.double()) ** 2).sum(-1).mean())
            rows = float((out_.round() == batch.Y.double()).all(-1).double().mean())
            got = run["final_layer_alone"][style]
            assert got["rows_exact"] == pytest.approx(rows, abs=1.5 / (64 * model.cfg.d))
            baseline = model.cfg.d / 4
            assert got["loss_recovered"] == pytest.approx((baseline - mse) / (baseline - own), abs=1e-4)
        minimal = run["mean"]["minimal"]
        assert minimal["size"] <= minimal["candidates"] and len(minimal["cells"]) == minimal["size"]
    assert sum(r["runs"] for r in result["summary"]) == 2
    config = Run.load(swept / "seed0").model.cfg
    scratch = any(s.kind == "S" for s in config.layout.segments)
    where = f"{config.attention_dir} scratch" if scratch else config.attention_dir
    assert {r["setting"] for r in result["runs"]} == {where}
    table = out.with_suffix(".md").read_text()
    assert f"Solved {where} runs" in table and f"| {where} | disentangled, 1 head | 3 | 2 |" in table
    monkeypatch.setattr(script, "examine", lambda *a: pytest.fail("a run in OUT was redone"))
    older = json.loads(out.read_text())
    for run in older["runs"]:  # as written before the resample style was measured, and the setting
        del run["final_layer_alone"]["resample"], run["setting"]
    out.write_text(json.dumps(older))
    other = tmp_path / "other"  # a sweep folder without these runs: their setting is unknown
    other.mkdir()
    (other / "sweep.jsonl").write_text("")
    with pytest.raises(SystemExit):
        script.main([str(other), "--prefix", "", "--out", str(out)])
    assert f"give their sweep folders ({swept.name}) too" in capsys.readouterr().err
    script.main([str(swept), "--prefix", "", "--out", str(out)])
    assert json.loads(out.read_text())["runs"] == result["runs"]  # brought up to date, not redone


def test_bad_per_group_is_one_clear_error(swept, tmp_path, monkeypatch, capsys):
    script = analyses_script(monkeypatch, "minimal_under_mean")
    with pytest.raises(SystemExit):
        script.main([str(swept), "--per-group", "0", "--out", str(tmp_path / "x.json")])
    assert "--per-group must be at least 1, got 0" in capsys.readouterr().err
