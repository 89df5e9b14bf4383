"""What each cell of a construction reads (``analysis.readings``), checked on inputs the derivation
never saw by a plain einsum forward written here, and by scrubbing each construction fed as its
readings say: an exact construction must stay exact, a reading that claims too little must fail."""

import pytest
import torch
from helpers import batch_for

from invperm_interp.analysis.gauge import gauge_fix
from invperm_interp.analysis.hypothesis import as_hypothesis
from invperm_interp.analysis.readings import (
    PARTNER,
    READS,
    cell_reads,
    construction_readings,
    join,
    placed_readings,
)
from invperm_interp.analysis.scrub import ScrubTester, partner_input, scrub, scrub_tester
from invperm_interp.maths import constructions as C
from invperm_interp.maths import registry

D = 5
WORKING = [n for n in registry.names() if registry.get(n).works]


def plain_streams(model, X):
    """``[h⁰, …, h^{L-1}]`` of a plain float64 forward of ``model`` on ``X`` (the mask as the
    model's)."""
    A = [b.attn.A.detach().double() for b in model.blocks]
    T = X.shape[1]
    h = torch.cat([X.double(), torch.eye(T, dtype=torch.float64).expand(len(X), T, T)], -1)
    masked = torch.ones(T, T, dtype=torch.bool).triu(1) if model.cfg.attention_dir == "causal" \
        else torch.zeros(T, T, dtype=torch.bool)
    out = []
    for layer_A in A:
        out.append(h)
        s = torch.einsum("btd,hde,bse->bhts", h, layer_A, h).masked_fill(masked, float("-inf"))
        h = torch.cat([h, *torch.einsum("bhts,bsd->hbtd", s.softmax(-1), h)], -1)
    return out


@pytest.mark.parametrize("name", WORKING)
def test_each_reading_holds_on_samples_the_derivation_never_saw(name):
    """"P" or "nothing": the same term on a partner with the sample's P (another Y); "Y" or
    "nothing": on one with its Y; "P and Y": some sample whose term each partner changes."""
    model = C.build(name, D)
    batch = batch_for(model, 96, seed=99)
    streams = {"sample": plain_streams(model, batch.X)}
    for keep in ("P", "Y"):
        streams[keep] = plain_streams(model, partner_input(batch, keep, shift=3).X)
    T, layout = batch.X.shape[1], model.cfg.layout
    allowed = torch.ones(T, T).tril().bool() if model.cfg.attention_dir == "causal" \
        else torch.ones(T, T, dtype=torch.bool)
    readings = construction_readings(name, model.cfg)
    assert set(readings) == {c.site for c in C.get(name).cells}
    for (layer, head, query, key), reading in readings.items():
        part = torch.zeros_like(model.blocks[layer].attn.A[head].detach())
        q, k = model.stream.slice(query, layer), model.stream.slice(key, layer)
        part[q, k] = model.blocks[layer].attn.A[head].detach()[q, k]
        fixed = gauge_fix(part, model.stream, layer)
        terms = {w: h[layer] @ fixed @ h[layer].transpose(1, 2) for w, h in streams.items()}
        scale = float(terms["sample"][:, allowed].abs().max())
        for (qs, ks), reads in reading.items():
            where = torch.zeros(T, T, dtype=torch.bool)
            where[layout.rows(qs), layout.rows(ks)] = True
            where &= allowed
            changed = {keep: float((terms[keep] - terms["sample"])[:, where].abs().max())
                       > 1e-9 * scale for keep in ("P", "Y")}
            assert reads in READS
            if reads in ("nothing", "P"):
                assert not changed["P"], (layer, query, key, qs, ks)
            if reads in ("nothing", "Y"):
                assert not changed["Y"], (layer, query, key, qs, ks)
            if reads == "P and Y":
                assert changed["P"] and changed["Y"], (layer, query, key, qs, ks)


def test_readings_of_the_note_forms_as_their_lookups_say():
    """theorem2: layer 1 is positional at (pos.P, pos.Y) and its (pos.P, x) lookup reads P where
    the keys are P rows; layer 2 looks up by the P-row position layer 1 found, so it reads P."""
    model = C.build("theorem2", D)
    got = construction_readings("theorem2", model.cfg)
    assert cell_reads(got[(0, 0, "pos.P", "pos.Y")]) == "nothing"
    assert got[(0, 0, "pos.P", "x")][("P", "P")] == "P"
    assert got[(0, 0, "pos.P", "x")][("P", "Y")] == "P and Y"  # Y_P rows' content is P Y
    assert got[(1, 0, "L1.pos.P", "pos.Y")][("P", "Y")] == "P"
    # a Y_P row attends uniformly in layer 1: its copied position is the same on every input
    assert got[(1, 0, "L1.pos.P", "pos.Y")][("Y", "Y")] == "nothing"


@pytest.mark.parametrize("name", WORKING)
def test_each_construction_scrubbed_as_its_readings_say_stays_exact(name):
    """Every cell fed from an input equivalent under what it reads: the construction's own
    output on every sample (a reading that missed a dependence would break a lookup)."""
    model = C.build(name, D)
    batch = batch_for(model, 128, seed=5)
    got = scrub(model, name, batch)
    assert got.rows_exact == 1.0 and got.loss_recovered == pytest.approx(1.0, abs=1e-6)


def test_a_reading_that_claims_too_little_is_rejected():
    """theorem2's layer-2 lookup said to read nothing: fed from another P it finds the wrong
    rows."""
    model = C.build("theorem2", D)
    batch = batch_for(model, 256, seed=5)
    hyp = as_hypothesis(model, "theorem2")
    tester = scrub_tester(model, batch)
    honest = tester.with_reads(hyp)
    lie = tuple((site, tuple((pair, "nothing") for pair, _ in pairs)) if site[0] == 1
                else (site, pairs) for site, pairs in honest.reads)
    from dataclasses import replace

    assert tester.circuit(honest).rows_exact == 1.0
    assert tester.circuit(replace(honest, reads=lie)).rows_exact < 0.5


def test_placed_readings_follow_the_placement_and_join_on_shared_cells():
    from invperm_interp.analysis.placements import best_placements
    from invperm_interp.analysis.projection import fixed_weights
    from invperm_interp.config import ModelConfig
    from invperm_interp.model.disentangled import DisentangledTransformer

    cfg = ModelConfig(C.get("appendix_b").make_layout(D), n_layers=3, n_heads=2,
                      attention_dir="bidirectional", readout="P", dtype="float64")
    model = DisentangledTransformer(cfg, seed=0)
    own = construction_readings("appendix_b", cfg)
    found = best_placements("appendix_b", model, fixed_weights(model))
    assert any(p.summed for p in found) and any(not p.summed for p in found)
    for placement in found:
        want: dict = {}
        for cell in C.get("appendix_b").cells:
            for placed, _ in placement.place_cells([cell]):
                have = want.setdefault(placed.site, {})
                for pair, reads in own[cell.site].items():
                    have[pair] = join(have.get(pair, "nothing"), reads)
        assert dict(placed_readings(placement, cfg)) == want
        assert {site[0] for site in want} == set(placement.layers)
    assert join("P", "Y") == "P and Y" and join("nothing", "P") == "P"
    assert join("P and Y", "nothing") == "P and Y" and join("Y", "Y") == "Y"
    assert set(PARTNER) == set(READS)


def test_a_screen_of_a_scrub_tester_scrubs_too():
    model = C.build("theorem2", D)
    tester = scrub_tester(model, batch_for(model, 64), keep="Y", shift=2)
    first = tester.head(16)
    assert isinstance(first, ScrubTester) and (first.keep, first.shift) == ("Y", 2)
    assert len(first.batch) == 16 and tester.head(64) is tester
