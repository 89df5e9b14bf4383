"""analyses/discovery.py: the guarded superposed forms it registers are exact as weights, for the
reason its docstring gives (checked on the layer-1 scores with a plain einsum), and the census's
minimal cells are grouped with a layer's copies identified."""

import pytest
import torch
from helpers import analyses_script, batch_for

from invperm_interp.maths import constructions as C
from invperm_interp.maths import registry


@pytest.fixture
def discovery(monkeypatch):
    module = analyses_script(monkeypatch, "discovery")
    yield module
    for name in module.FORMS:
        registry.REGISTRY.pop(name, None)


def test_the_guard_changes_no_lookup_and_only_pushes_the_y_rows_off_the_y_keys(discovery):
    discovery.register_forms(max_d=5)  # the script checks d up to 16
    for (name, base), d in zip(discovery.FORMS.items(), (3, 5)):
        beta = registry.get(name).beta_exact
        guarded, plain = C.build(name, d, beta), C.build(base, d, beta)
        assert torch.equal(guarded.blocks[1].attn.A, plain.blocks[1].attn.A)
        delta = (guarded.blocks[0].attn.A - plain.blocks[0].attn.A)[0]  # (D, D): the guard alone
        batch = batch_for(guarded, 32)
        X = batch.X.double()
        T = X.shape[1]
        h = torch.cat([X, torch.eye(T, dtype=torch.float64).expand(len(X), T, T)], -1)
        scores = torch.einsum("bqe,ef,bkf->bqk", h, delta, h)  # what the guard adds, per query/key
        P, Y = slice(0, d), slice(d, 2 * d)
        mass = X.sum(-1)  # (B, T): each row's content mass
        # P rows see only P rows (causal): the guard adds β - β = 0 to every key
        assert scores[:, P, P].abs().max() < 1e-9
        # Y_P rows: nothing on the P keys, -β·m_q·(1 + m_k) on the Y_P keys
        assert scores[:, Y, P].abs().max() < 1e-9
        want = -beta * mass[:, Y, None] * (1 + mass[:, None, Y])
        assert torch.allclose(scores[:, Y, Y], want, atol=1e-9)
        # scratch rows hold no content: their queries get nothing
        assert scores[:, 2 * d:, :].abs().max() < 1e-9
        assert C.exact_error(name, d, beta) < 1e-6


def test_minimal_cells_are_grouped_with_a_layers_copies_identified(discovery):
    assert discovery.identified("L2 -I at (L1.pos.S, L1.x)") == (2, "pos.S", "x")
    assert discovery.identified("L1 1 at (x, pos.P)") == (1, "x", "pos.P")
    assert discovery.raw("L2 -I at (L1.pos.S, L1.x)") == (2, "L1.pos.S", "L1.x")
    rows = [{"run": f"r{i}", "kind": "scratch", "steps_to_target": 100, "mechanism": "none",
             "minimal_cells": cells} for i, cells in enumerate((
                 ["L2 -I at (L1.pos.S, L1.x)", "L1 1 at (x, pos.P)"],
                 ["L2 -I at (pos.S, x)", "L1 1 at (x, pos.P)", "L2 -I at (pos.S, L1.x)"],
                 ["L1 -I at (pos.Y, pos.P)"]))]
    found = discovery.by_cell_set(rows)
    assert (found["runs"], found["forms"], found["forms_held_by_several"]) == (3, 2, 1)
    assert found["per_run"]["r0"]["layer1_content_query"] == ["(x, pos.P)"]
    assert found["per_run"]["r2"]["superposed_cells_held"] == 1
