"""compare(): a construction matches itself and not its printed form; closest_construction() names
the construction a learned-like model was made from; `invperm analyze` writes analysis.json."""

import json

import pytest
import torch
from helpers import batch_for

from invperm_interp import HookedDisentangledTransformer, Layout, ModelConfig
from invperm_interp.analysis import closest_construction, compare, perturb
from invperm_interp.analysis.compare import candidates
from invperm_interp.cli import main
from invperm_interp.maths import constructions as C

WORKING = [n for n in C.names() if C.REGISTRY[n].works]
F64 = torch.float64


@pytest.mark.parametrize("name", WORKING)
def test_a_construction_matches_itself_perfectly(name):
    model = C.build(name, 5)
    report = compare(model, C.build(name, 5), batch_for(model))
    assert report.identical and report.same_stream
    assert all(h.weight_cosine == pytest.approx(1.0) and h.pattern_tv == 0.0 for h in report.heads)
    assert all(c.cosine == pytest.approx(1.0) for c in report.cells) and report.cells
    assert report.max_abs_diff == 0.0 and report.rounded_agreement == 1.0
    assert report.mse_a == report.mse_b < 1e-9
    assert report.closest_a == report.closest_b == name


@pytest.mark.parametrize("name", ["theorem2", "appendix_b", "theorem3"])
def test_a_construction_is_not_its_printed_form(name):
    model, printed = C.build(name, 5), C.build(f"{name}_as_printed", 5)
    report = compare(model, printed, batch_for(model), closest=False)
    assert not report.identical
    assert min(h.weight_cosine for h in report.heads) < 0.9
    assert max(h.pattern_tv for h in report.heads) > 0.1
    assert report.rounded_agreement < 0.99 and report.mse_b > 0.5 > report.mse_a
    assert report.closest_a is None  # not asked


@pytest.mark.parametrize("name", C.names())
def test_closest_construction_names_the_one_a_learned_like_model_came_from(name):
    built = C.build(name, 5, 30.0)
    learned = perturb(built, gauge=30.0, noise=0.5, seed=1)
    ranked = closest_construction(learned, batch_for(learned))
    assert [m.name for m in ranked][0] == name
    assert set(m.name for m in ranked) == {str(p) for p in candidates(learned)}
    best = ranked[0]
    assert best.weight_cosine > 0.9 and best.circuit_overlap == best.cells_found == 1.0
    # its cells carry the weights, the noise the rest: as much as in the construction itself (each
    # atom's share is its own; correlated atoms, as the guard's, sum to less than 1 without noise)
    clean = closest_construction(built, batch_for(built))[0].norm_share
    assert best.norm_share > 0.9 * clean and clean > 0.85
    assert all(best.pattern_tv <= m.pattern_tv for m in ranked)


@pytest.mark.parametrize("name", ["two_block", "theorem3"])
def test_closest_construction_fits_beta(name):
    model = C.build(name, 5, 50.0)
    best = closest_construction(model, batch_for(model))[0]
    assert (best.name, best.beta, best.weight_cosine) == (name, 50.0, pytest.approx(1.0))
    assert best.pattern_tv < 1e-12


@pytest.mark.parametrize("cfg, expected", [
    (dict(layout=Layout.plain(4), attention_dir="bidirectional"),
     ["theorem2_as_printed", "theorem2", "two_block", "appendix_b_as_printed", "appendix_b"]),
    (dict(layout=Layout.scratch(4), attention_dir="causal", readout="S"),
     ["theorem3_as_printed", "theorem3", "theorem3_two_block", "theorem3_two_block_mass",
      "theorem3_complement", "theorem3_superposed", "theorem3_superposed_complement",
      "theorem3_superposed_guarded", "theorem3_superposed_complement_guarded",
      "found_scratch_1x1_3a2b51"]),  # discovered in 3-layer models, two layers (maths/discovered.json)
    (dict(layout=Layout.plain(4), attention_dir="causal"), []),
    (dict(layout=Layout.scratch(4, 3), attention_dir="causal", readout="P"), []),
    # two heads a layer: each at its best-weighted placement, on one head of each layer
    (dict(layout=Layout.plain(4), attention_dir="bidirectional", n_heads=2),
     ["theorem2_as_printed", "theorem2", "two_block", "appendix_b_as_printed", "appendix_b"]),
])
def test_candidates_share_layout_mask_and_readout(cfg, expected):
    model = HookedDisentangledTransformer(ModelConfig(**cfg))
    found = candidates(model)
    assert [p.construction for p in found] == expected
    assert all(p.shape == model.cfg.heads and not p.summed for p in found)
    assert all(p.trivial for p in found) == (model.cfg.heads == (1, 1))


def test_constructions_that_cannot_be_built_at_d_are_not_candidates():
    """At d = 1 the forms that need another P row (``min_d`` 2) are skipped, not fatal."""
    model = C.build("theorem3", 1)
    names = [p.construction for p in candidates(model)]
    assert "theorem3" in names and "theorem3_superposed_complement" not in names
    assert all(C.REGISTRY[n].min_d <= 1 for n in names)
    assert closest_construction(model, batch_for(model))[0].name == "theorem3"


def test_analyze_a_scratch_construction_at_d_1(tmp_path, capsys):
    assert main(["analyze", "--construction", "theorem3", "--d", "1", "--n", "32",
                 "--out", str(tmp_path)]) == 0, capsys.readouterr().err
    report = json.loads((tmp_path / "analysis.json").read_text())
    assert "theorem3_superposed_complement" not in {m["name"] for m in report["closest"]}


def test_models_on_different_streams_compare_by_function_only():
    layout = Layout.plain(3)
    one = HookedDisentangledTransformer(ModelConfig(layout, attention_dir="bidirectional",
                                                   dtype="float64", init_scale=1.0), seed=0)
    two = HookedDisentangledTransformer(ModelConfig(layout, n_heads=[2, 1], attention_dir="bidirectional",
                                                   dtype="float64", init_scale=1.0), seed=0)
    report = compare(one, two, batch_for(one), closest=False)
    assert not report.same_stream and report.cells == ()
    assert all(h.weight_cosine is None and h.raw_cosine is None for h in report.heads)
    assert [(h.layer, h.head) for h in report.heads] == [(0, 0), (1, 0)]
    assert all(0 < h.pattern_tv < 1 for h in report.heads)
    with pytest.raises(ValueError, match="same layout"):
        compare(one, C.build("theorem2", 4), batch_for(one))


def test_analyze_writes_analysis_json_for_a_construction(tmp_path, capsys):
    assert main(["analyze", "--construction", "theorem3", "--d", "4", "--n", "64",
                 "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "I at (L1.pos.P, pos.Y)" in printed and "scratch remove" in printed
    report = json.loads((tmp_path / "analysis.json").read_text())
    cells = {(a["layer"], a["head"], a["query"], a["key"], a["label"]) for a in report["circuit"]["atoms"]}
    assert cells == set(C.REGISTRY["theorem3"].cells)
    assert report["closest"][0]["name"] == "theorem3"
    assert report["mechanism"]["name"] == "theorem3" and "mechanism: theorem3" in printed
    assert len(report["cells"]) == 4**2 + 8**2  # every (query, key) cell: 4 blocks, then 8
    assert {r["name"] for r in report["ablations"]} >= {"ablate mask", "scratch remove"}


def test_analyze_reads_a_training_run(tmp_path, capsys):
    from invperm_interp.config import TrainConfig
    from invperm_interp.training.single import train

    cfg = ModelConfig(Layout.plain(3), attention_dir="bidirectional")
    train(cfg, TrainConfig(steps=4, batch_size=16, eval_every=4, eval_size=16, out_dir=str(tmp_path),
                           device="cpu"), progress=False)
    assert main(["analyze", str(tmp_path), "--n", "32"]) == 0
    report = json.loads((tmp_path / "analysis.json").read_text())
    assert report["model"] == cfg.to_dict() and report["source"] == f"run {tmp_path}"
    assert "circuit" in capsys.readouterr().out


def test_analyze_errors_are_one_line(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "missing")]) == 2
    assert main(["analyze"]) == 2
    assert main(["analyze", "--construction", "nope"]) == 2
    assert capsys.readouterr().err.count("invperm analyze: error") == 3
