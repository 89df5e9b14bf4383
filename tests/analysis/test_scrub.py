"""Causal scrubbing, cell-level path patching and completeness under every style, against a plain
float64 einsum forward written here: the circuit's cells run on the sample, the rest of ``A`` on
a partner input (the full model's stream on it), everything downstream recomputed."""

import pytest
import torch
from helpers import add_cells, batch_for

from invperm_interp.analysis.scrub import (
    CLAIM_EQUIVALENCE,
    STYLES,
    cell_patching,
    completeness,
    partner_input,
    scrub,
    scrub_tester,
)
from invperm_interp.analysis.treeify import treeified
from invperm_interp.maths import constructions as C
from invperm_interp.maths.cells import Cell
from invperm_interp.task import mse

D, BETA, GAMMA = 4, 45.0, 30.0
SCRATCH = [1.0] + [0.0] * (D - 1)  # s = e_0: a scratch row's content has mass 1, as pos.S has
BASE = "theorem3_two_block"
# Layer 2 (the last, where only the scratch rows are read): a content-mass lift of the keys
# from the scratch row's position, and its guard, the same lift taken away through the scratch
# row's content (s = e_0). Together they cancel on every input; each alone depends on Y.
LIFT, GUARD = (1, "pos.S", "x", "1"), (1, "x", "x", "-1")
HARMLESS = (0, "pos.P", "pos.P", "I")  # position only: P rows lean on themselves in layer 1


def guarded_model():
    model = C.build(BASE, D, BETA, scratch=SCRATCH)
    add_cells(model, [LIFT, GUARD], GAMMA)
    return add_cells(model, [HARMLESS], 5.0)


def claim_cells(with_guard: bool):
    """The construction's cells (its scratch guard among them), the lift, and the guard if asked;
    never the harmless cell, which scrubbing keeps (it is the same on every partner)."""
    cells = [*C.get(BASE).cells, (1, "pos.S", "pos.S", "-1"), LIFT]
    return cells + [GUARD] if with_guard else cells


def raw_split(model, cells):
    """Per layer, the raw ``A`` of ``cells`` and of everything else ``(D_l, D_l)``, float64."""
    inside, outside = [], []
    for layer, block in enumerate(model.blocks):
        A = block.attn.A.detach()[0].double()
        keep = torch.zeros_like(A)
        for c in map(Cell.of, cells):
            if c.layer == layer:
                keep[model.stream.slice(c.query, layer), model.stream.slice(c.key, layer)] = 1.0
        inside.append(A * keep)
        outside.append(A * (1 - keep))
    return inside, outside


def streams(model, As, X):
    """The plain forward's stream entering each layer and the last one: ``[h⁰, h¹, h²]``."""
    T = X.shape[1]
    h = torch.cat([X.double(), torch.eye(T, dtype=torch.float64).expand(len(X), T, T)], -1)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    out = [h]
    for A in As:
        s = torch.einsum("btd,de,bse->bts", h, A, h).masked_fill(mask, float("-inf"))
        h = torch.cat([h, torch.einsum("bts,bsd->btd", s.softmax(-1), h)], -1)
        out.append(h)
    return out


def scrubbed_reference(model, inside, outside, X, X_inside, X_outside):
    """Causal scrubbing written out: ``inside`` scored on the full model's stream on ``X_inside``
    (a partner equivalent under the claim), ``outside`` on its stream on ``X_outside`` (another
    input), the attention they make moving the sample's own recomputed stream: ``(B, d, d)``."""
    full = [a + b for a, b in zip(inside, outside)]
    fed_in, fed_out = streams(model, full, X_inside), streams(model, full, X_outside)
    T = X.shape[1]
    h = streams(model, [], X)[0]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    for layer, (K, R) in enumerate(zip(inside, outside)):
        hi, ho = fed_in[layer], fed_out[layer]
        s = (torch.einsum("btd,de,bse->bts", hi, K, hi)
             + torch.einsum("btd,de,bse->bts", ho, R, ho)).masked_fill(mask, float("-inf"))
        h = torch.cat([h, torch.einsum("bts,bsd->btd", s.softmax(-1), h)], -1)
    return h[:, model.cfg.readout_rows] @ model.unembed.W_U.detach().double()


def fed_reference(model, live, fed, X, X_partner):
    """``live`` run on the sample's recomputed stream, ``fed`` scored on the full model's stream
    on ``X_partner``: completeness under scrubbing, ``(B, d, d)``."""
    partner = streams(model, [a + b for a, b in zip(live, fed)], X_partner)
    T = X.shape[1]
    h = streams(model, [], X)[0]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    for layer, (K, R) in enumerate(zip(live, fed)):
        hp = partner[layer]
        s = (torch.einsum("btd,de,bse->bts", h, K, h)
             + torch.einsum("btd,de,bse->bts", hp, R, hp)).masked_fill(mask, float("-inf"))
        h = torch.cat([h, torch.einsum("bts,bsd->btd", s.softmax(-1), h)], -1)
    return h[:, model.cfg.readout_rows] @ model.unembed.W_U.detach().double()


def partner_by_hand(batch, keep, shift=1):
    """``[P; P Y'; S]`` with ``Y'`` (``keep="P"``), ``P`` (``keep="Y"``) or both (``keep="any"``)
    from sample ``b + shift``."""
    nxt = lambda t: t.roll(-shift, 0)  # noqa: E731
    P = batch.P if keep == "P" else nxt(batch.P)
    Y = batch.Y if keep == "Y" else nxt(batch.Y)
    S = torch.tensor(SCRATCH, dtype=P.dtype).expand(len(P), D, D)
    return torch.cat([P, P @ Y, S], 1)


def test_the_partner_keeps_what_it_names_and_takes_the_rest_from_the_next_sample():
    model = guarded_model()
    batch = batch_for(model, 8)
    for keep in ("P", "Y"):
        partner = partner_input(batch, keep)
        assert torch.equal(partner.X, partner_by_hand(batch, keep))
        assert torch.equal(partner.Y, batch.Y if keep == "Y" else batch.Y.roll(-1, 0))
    with pytest.raises(ValueError, match="keep must be one of"):
        partner_input(batch, "S")
    with pytest.raises(ValueError, match="shift must be an integer"):
        partner_input(batch, shift=8)


def test_every_registered_claim_names_the_same_P_another_Y():
    assert CLAIM_EQUIVALENCE == {name: "P" for name in C.names()}


@pytest.mark.parametrize("with_guard", [True, False])
def test_scrubbing_matches_the_plain_einsum_forward(with_guard):
    model = guarded_model()
    batch = batch_for(model, 64, seed=1)
    cells = claim_cells(with_guard)
    inside, outside = raw_split(model, cells)
    ref = scrubbed_reference(model, inside, outside, batch.X, partner_by_hand(batch, "P", 2),
                             partner_by_hand(batch, "any", 1))
    got = scrub(model, cells, batch)
    assert got.mse == pytest.approx(float(mse(ref, batch.Y)), rel=1e-9, abs=1e-12)
    exact = float((ref.round() == batch.Y.double()).all(-1).double().mean())
    assert got.rows_exact == exact


def test_a_claim_with_the_guard_scrubs_to_the_clean_model_and_one_without_loses():
    model = guarded_model()
    batch = batch_for(model, 256, seed=1)
    with torch.no_grad():
        clean = float(mse(model(batch.X), batch.Y))
    assert clean < 1e-12  # the lift and its guard cancel: the model is the construction
    whole = scrub(model, claim_cells(True), batch)
    assert whole.loss_recovered == pytest.approx(1.0, abs=1e-9) and whole.rows_exact == 1.0
    lacking = scrub(model, claim_cells(False), batch)
    assert lacking.loss_recovered < 0.5 and lacking.rows_exact < 0.8


def test_scrubbing_cannot_see_a_position_only_cell_and_zero_ablation_can():
    """The construction's own ``-1`` at (pos.S, pos.P) is the same on every partner."""
    model = C.build(BASE, D, BETA, scratch=SCRATCH)
    batch = batch_for(model, 256, seed=2)
    lacking = [c for c in C.get(BASE).cells if (c.query, c.key) != ("pos.S", "pos.P")]
    lacking.append((1, "pos.S", "pos.S", "-1"))
    assert scrub(model, lacking, batch).loss_recovered == pytest.approx(1.0, abs=1e-9)
    from invperm_interp.analysis import faithfulness

    assert faithfulness(model, lacking, batch, minimality=False).circuit.rows_exact < 0.99


def test_path_patching_finds_the_missing_guard():
    model = guarded_model()
    batch = batch_for(model, 256, seed=1)
    found = cell_patching(model, claim_cells(False), batch)
    assert found.base.loss_recovered < 0.5
    top = found.cells[0]
    assert top.cell == (1, 0, "x", "x")
    assert top.score.loss_recovered == pytest.approx(1.0, abs=1e-9)
    assert top.norm == pytest.approx(GAMMA * D, rel=1e-9)  # ‖γ·1‖ over a d × d cell
    # the harmless cell left out of the claim (spread over the pos.P query row's position keys by
    # the gauge fixing) recovers nothing the claim lacks
    assert {p.cell[:3] for p in found.cells[1:]} == {(0, 0, "pos.P")}
    assert all(abs(found.gain(p)) < 1e-9 for p in found.cells[1:])


def test_completeness_under_every_style_against_the_plain_forward():
    """Without its cells the construction is broken under every style; scrubbing (the circuit fed
    from another P, the same Y) recomputed by hand. (Zero ablation removes cells in the gauge-fixed
    frame, which test_faithfulness checks; raw zeroing would remove gauge too.)"""
    model = C.build(BASE, D, BETA, scratch=SCRATCH)
    batch = batch_for(model, 128, seed=3)
    got = completeness(model, BASE, batch)  # the claim: the registry's cells, not the scratch guard
    assert tuple(got) == STYLES
    inside, outside = raw_split(model, C.get(BASE).cells)
    ref = fed_reference(model, outside, inside, batch.X, partner_by_hand(batch, "Y"))
    assert got["scrub"].mse == pytest.approx(float(mse(ref, batch.Y)), rel=1e-9)
    assert all(s.rows_exact < 0.5 and s.loss_recovered < 0.3 for s in got.values())


def test_a_standard_model_is_scrubbed_through_its_exact_map():
    """As ``analyze`` reads it: the disentangled model computing the same function, so every
    function takes a standard attention-only model and scores it as its map."""
    from dataclasses import replace

    from invperm_interp import Layout, ModelConfig
    from invperm_interp.model.note_map import to_disentangled
    from invperm_interp.model.standard import StandardTransformer

    cfg = ModelConfig(Layout.plain(3), arch="standard", d_model=8, init_scale=0.3, dtype="float64",
                      attention_dir="bidirectional")
    model = StandardTransformer(cfg, seed=0)
    mapped = to_disentangled(model)
    batch = batch_for(mapped, 32)
    assert scrub(model, "two_block", batch) == scrub(mapped, "two_block", batch)
    assert completeness(model, "two_block", batch) == completeness(mapped, "two_block", batch)
    assert cell_patching(model, "two_block", batch) == cell_patching(mapped, "two_block", batch)
    with pytest.raises(ValueError, match="LayerNorm"):
        scrub(StandardTransformer(replace(cfg, layernorm=True)), "two_block", batch)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_weights_that_are_not_finite_are_refused_naming_the_layer(bad):
    model = C.build("two_block", 3)
    batch = batch_for(model, 16)
    with torch.no_grad():
        model.blocks[1].attn.A[0, 0, 0] = bad
    for run in (scrub, completeness, cell_patching):
        with pytest.raises(ValueError, match=r"^the model's weights are not finite \(NaN or inf\) "
                                             r"in layer 2 \(blocks\.1\)"):
            run(model, "two_block", batch)


def test_a_cell_the_model_does_not_have_is_refused():
    model = C.build("two_block", 3)
    batch = batch_for(model, 16)
    with pytest.raises(ValueError, match=r"^cells: \(9, 0, 'x', 'y'\) is not a cell of this model"):
        cell_patching(model, "two_block", batch, cells=[(1, 0, "x", "x"), (9, 0, "x", "y")])
    with pytest.raises(ValueError, match=r"^cells: \(0, 0, 'pos.P', 'nope'\) is not a cell"):
        cell_patching(model, "two_block", batch, cells=[(0, 0, "pos.P", "nope")])
    fine = cell_patching(model, "two_block", batch, cells=[(1, 0, "x", "x")])
    assert {p.cell for p in fine.cells} <= {(1, 0, "x", "x")}


def test_a_construction_claim_feeds_each_cell_from_the_partner_of_what_it_reads():
    """The claim of a registered construction says per cell and per (query segment, key segment)
    what its term reads (``analysis.readings``): each term scored on the full model's stream on
    that partner (nothing: another input; P: the same P; Y: the same Y), the rest on another
    input, written out here with the circuit's fitted weights and the gauge fixing."""
    from invperm_interp.analysis.gauge import gauge_fix
    from invperm_interp.analysis.hypothesis import as_hypothesis
    from invperm_interp.analysis.projection import fixed_weights, raw_weights

    model = guarded_model()
    batch = batch_for(model, 64, seed=1)
    tester = scrub_tester(model, batch)
    hyp = tester.with_reads(as_hypothesis(model, BASE))
    partners = {"any": partner_by_hand(batch, "any", 4), "P": partner_by_hand(batch, "P", 2),
                "Y": partner_by_hand(batch, "Y", 3)}
    full = [b.attn.A.detach()[0].double() for b in model.blocks]
    fed = {k: streams(model, full, X) for k, X in partners.items()}
    fed["removed"] = streams(model, full, partner_by_hand(batch, "any", 1))
    fixed = [F[0] for F in fixed_weights(model)]
    M = [R[0] for R in raw_weights(model, hyp, fixed_weights(model))]
    layout, T = model.cfg.layout, batch.X.shape[1]
    h = streams(model, [], batch.X)[0]
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    used = set()
    for layer in range(2):
        hr = fed["removed"][layer]
        s = torch.einsum("btd,de,bse->bts", hr, fixed[layer] - gauge_fix(M[layer], model.stream, layer), hr)
        for (at, _, query, key), pairs in hyp.reads:
            if at != layer:
                continue
            part = torch.zeros_like(M[layer])
            q, k = model.stream.slice(query, layer), model.stream.slice(key, layer)
            part[q, k] = M[layer][q, k]
            part = gauge_fix(part, model.stream, layer)
            for (qs, ks), reads in pairs:
                partner = {"nothing": "any", "P": "P", "Y": "Y"}[reads]
                used.add(partner)
                hp = fed[partner][layer]
                term = torch.einsum("btd,de,bse->bts", hp, part, hp)
                s[:, layout.rows(qs), layout.rows(ks)] += term[:, layout.rows(qs), layout.rows(ks)]
        s = s.masked_fill(mask, float("-inf"))
        h = torch.cat([h, torch.einsum("bts,bsd->btd", s.softmax(-1), h)], -1)
    ref = h[:, model.cfg.readout_rows] @ model.unembed.W_U.detach().double()
    assert used == {"any", "P", "Y"}  # every partner is met in this claim
    got = tester.circuit(hyp)
    assert got.mse == pytest.approx(float(mse(ref, batch.Y)), rel=1e-9, abs=1e-12)


def test_scrubbing_one_level_deep_is_the_scrub_tester_and_deeper_levels_stop_at_the_layers():
    from invperm_interp.analysis import perturb
    from invperm_interp.analysis.hypothesis import as_hypothesis

    model = perturb(C.build("two_block", 5, 30.0), gauge=1.0, noise=0.3, seed=1)
    batch = batch_for(model, 128, seed=4)
    tester = scrub_tester(model, batch)
    for claim in ("two_block", "appendix_b", [(1, "pos.P", "L1.x", "I")]):
        hyp = as_hypothesis(model, claim)
        assert treeified(tester, hyp, 1).mse == pytest.approx(tester.circuit(hyp).mse, rel=1e-9)
        assert treeified(tester, hyp, 3) == treeified(tester, hyp, 2)  # layer 1 reads the input
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match=r"^depth must be an integer >= 1"):
            treeified(tester, as_hypothesis(model, "two_block"), bad)


def test_scrubbing_two_levels_deep_against_the_treeified_einsum_forward():
    """Two levels on a two-layer model, written out: layer 2's claimed terms read each partner's
    own scrubbed stream, whose layer 1 took its claimed terms from the partner's partners' inputs
    and the rest from another input's."""
    from invperm_interp.analysis.gauge import gauge_fix
    from invperm_interp.analysis.hypothesis import as_hypothesis
    from invperm_interp.analysis.projection import fixed_weights, raw_weights

    model = C.build(BASE, D, 8.0, scratch=SCRATCH)  # soft: a claim whose errors can move
    with torch.no_grad():  # layer 1 reads the input outside the claim: its partner's run moves
        A = model.blocks[0].attn.A
        A += torch.randn(A.shape, generator=torch.Generator().manual_seed(3), dtype=A.dtype)
    batch = batch_for(model, 32, seed=2)
    tester = scrub_tester(model, batch)
    hyp = tester.with_reads(as_hypothesis(model, BASE))
    fixed = [F[0] for F in fixed_weights(model)]
    M = [R[0] for R in raw_weights(model, hyp, fixed_weights(model))]
    layout, T, stream = model.cfg.layout, batch.X.shape[1], model.stream
    shift = {"P": 2, "Y": 3, "any": 4}  # the tester's partners past the removed part's (shift 1)
    kind = {"nothing": "any", "P": "P", "Y": "Y"}
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    full = [b.attn.A.detach()[0].double() for b in model.blocks]

    def terms(layer):
        """(partner, gauge-fixed part, positions or None) of one layer, as the claim feeds them."""
        out, rest = [], M[layer].clone()
        for (at, _, query, key), pairs in hyp.reads:
            if at != layer:
                continue
            q, k = stream.slice(query, layer), stream.slice(key, layer)
            part = torch.zeros_like(M[layer])
            part[q, k] = M[layer][q, k]
            rest[q, k] = 0
            for (qs, ks), reads in pairs:
                where = torch.zeros(T, T, dtype=torch.float64)
                where[layout.rows(qs), layout.rows(ks)] = 1
                out.append((kind[reads], gauge_fix(part, stream, layer), where))
        out.append(("P", gauge_fix(rest, stream, layer), None))
        out.append(("removed", fixed[layer] - gauge_fix(M[layer], stream, layer), None))
        return out

    def partner(b, keep):
        return partner_input(b, "any", 1) if keep == "removed" else partner_input(b, keep, shift[keep])

    def layer_out(h, b, layer, feed):
        s = 0
        for keep, part, where in terms(layer):
            hp = feed(partner(b, keep), keep)[layer]
            t = torch.einsum("btd,de,bse->bts", hp, part, hp)
            s = s + (t if where is None else t * where)
        a = s.masked_fill(mask, float("-inf")).softmax(-1)
        return torch.cat([h, torch.einsum("bts,bsd->btd", a, h)], -1)

    def clean(b, keep=None):
        return streams(model, full, b.X)

    def level_one(b, keep):  # a partner's run scrubbed one level: layer 1 from its partners' inputs
        if keep == "removed":
            return clean(b)
        h0 = streams(model, [], b.X)[0]
        return [h0, layer_out(h0, b, 0, clean)]

    h = streams(model, [], batch.X)[0]
    h = layer_out(h, batch, 0, level_one)
    h = layer_out(h, batch, 1, level_one)
    ref = h[:, model.cfg.readout_rows] @ model.unembed.W_U.detach().double()
    got = treeified(tester, hyp, 2)
    assert got.mse == pytest.approx(float(mse(ref, batch.Y)), rel=1e-9, abs=1e-12)
    assert got.mse != pytest.approx(tester.circuit(hyp).mse, rel=0.1, abs=0)  # the recursion matters


def test_every_construction_scrubbed_to_the_bottom_stays_exact():
    from invperm_interp.analysis.hypothesis import as_hypothesis
    from invperm_interp.maths import registry

    for name in (n for n in registry.names() if registry.get(n).works):
        model = C.build(name, 4)
        batch = batch_for(model, 64, seed=6)
        got = treeified(scrub_tester(model, batch), as_hypothesis(model, name), model.cfg.n_layers)
        assert got.rows_exact == 1.0, name
