"""From trained-like models to a registered construction (``analysis.registration``): a construction
hidden from the registry is discovered in noisy gauged models, registered in a data file with its
provenance, loaded back, and named by the rule on a model it was not discovered on; a hand-edited
entry is not loaded."""

import json
import warnings

import pytest
from helpers import batch_for

from invperm_interp.analysis import perturb
from invperm_interp.analysis.discover import discover
from invperm_interp.analysis.mechanism import mechanism
from invperm_interp.analysis.registration import register_proposals
from invperm_interp.maths import constructions as C
from invperm_interp.maths import registry


@pytest.fixture
def hidden(monkeypatch):
    """Models of two_block (three to discover on, one held out) and one of appendix_b, built while
    the registry knows two_block; then a registry without it (restored after the test)."""
    models = {f"run{i}": perturb(C.build("two_block", 5, beta), gauge=3.0, noise=0.05, seed=i)
              for i, beta in enumerate((25.0, 35.0, 45.0))}
    models["named"] = perturb(C.build("appendix_b", 5, 30.0), gauge=3.0, seed=7)
    held_out = perturb(C.build("two_block", 6, 40.0), gauge=3.0, noise=0.05, seed=99)
    without = {k: v for k, v in C.REGISTRY.items() if k != "two_block"}
    monkeypatch.setattr(C, "REGISTRY", without)
    monkeypatch.setattr(registry, "REGISTRY", without)
    return models, held_out


def test_a_hidden_construction_is_registered_and_named_on_a_model_it_never_saw(hidden, tmp_path):
    models, held_out = hidden
    path = tmp_path / "discovered.json"
    assert mechanism(held_out, batch_for(held_out, 512)).name is None  # unknown: no name
    found = discover(models, n=512)
    (done,) = register_proposals(found, models, path=path)
    assert done.name is not None and done.name.startswith("found_plain_1x1_"), done
    (entry,) = json.loads(path.read_text())
    assert entry["name"] == done.name and entry["verified"] == registry.entry_digest(entry)
    assert sorted(entry["provenance"]["runs"]) == ["run0", "run1", "run2"]
    assert entry["provenance"]["shapes"] == ["1x1"] * 3
    # registered over the widest of RANGES it is exact on
    assert (entry["min_d"], entry["max_d"]) == (1, 16) and entry["beta_exact"] is not None
    registered = C.REGISTRY.pop(done.name)  # as a fresh process finds it: loaded from the file
    loaded = registry.load_discovered(path)[done.name]
    assert loaded.cells == registered.cells and loaded.beta_exact == registered.beta_exact
    C.REGISTRY[done.name] = loaded
    assert set(loaded.cells) == {(0, 0, "pos.Y", "pos.P", "I"), (1, 0, "pos.P", "L1.x", "I")}
    # exact over its range, as the registry checks it
    assert all(C.exact_error(done.name, d, loaded.beta_exact) < C.REGISTER_TOL for d in (3, 6, 10))
    # the rule now names it on a model of another d and seed that discovery never saw
    assert mechanism(held_out, batch_for(held_out, 512)).name == done.name
    # found again: the same name, one entry
    (again,) = register_proposals(found, models, path=path)
    assert again.name is None and done.name in again.reason and len(json.loads(path.read_text())) == 1


def test_an_entry_edited_by_hand_is_not_loaded(hidden, tmp_path):
    models, _ = hidden
    path = tmp_path / "discovered.json"
    (done,) = register_proposals(discover(models, n=512), models, path=path)
    entries = json.loads(path.read_text())
    entries[0]["cells"][1][4] = "J"  # an inexact form, its digest kept
    path.write_text(json.dumps(entries))
    with pytest.warns(UserWarning, match=f"{done.name}.*differs from what was verified"):
        assert registry.load_discovered(path) == {}
    assert registry.load_discovered(tmp_path / "none.json") == {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert registry.load_discovered(registry.DISCOVERED) is not None  # the committed file loads


def test_a_proposal_that_is_not_exact_or_not_faithful_enough_says_why(hidden, tmp_path):
    models, _ = hidden
    found = discover(models, n=512)
    (few,) = register_proposals(found, models, path=tmp_path / "d.json", min_runs=4)
    assert few.name is None and "fewer than 4" in few.reason and not (tmp_path / "d.json").exists()


@pytest.mark.parametrize("name", [n for n, s in registry.REGISTRY.items() if s.provenance])
def test_each_committed_discovered_construction_is_exact_over_its_range(name):
    """What ``--register`` wrote is exact where it claims, checked here by a plain numpy forward
    (not the builder) at β_exact and at 2.5 β_exact, on draws and edge inputs of this test's own."""
    import numpy as np
    import torch
    from helpers import numpy_run

    from invperm_interp.task import sample_batch

    spec = registry.REGISTRY[name]
    assert spec.works and spec.beta_exact is not None and len(dict(spec.provenance)["runs"]) >= 2
    for d in range(spec.min_d, spec.max_d + 1):
        for beta, tol in ((spec.beta_exact, C.REGISTER_TOL), (2.5 * spec.beta_exact, 1e-12)):
            model = C.build(name, d, beta, hooked=False)
            for batch in (sample_batch(model.cfg.layout, 32, generator=torch.Generator().manual_seed(d),
                                       dtype=torch.float64), C.edge_inputs(model.cfg.layout)):
                out = numpy_run(model.cfg, [b.attn.A.detach() for b in model.blocks],
                                model.unembed.W_U.detach(), batch.X.numpy())
                assert np.abs(out - batch.Y.numpy()).max() < tol, (d, beta)
