"""The guarded superposed forms (maths.registry): the content-mass guard changes no lookup and only
pushes the Y_P rows' queries off the Y_P keys, the reason they are exact as β grows, checked on the
layer-1 scores with a plain einsum against the unguarded form's weights."""

import pytest
import torch
from helpers import batch_for

from invperm_interp.maths import constructions as C
from invperm_interp.maths import registry


@pytest.mark.parametrize(("name", "base", "d"), [
    ("theorem3_superposed_guarded", "theorem3_superposed", 3),
    ("theorem3_superposed_complement_guarded", "theorem3_superposed_complement", 5)])
def test_the_guard_changes_no_lookup_and_only_pushes_the_y_rows_off_the_y_keys(name, base, d):
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
