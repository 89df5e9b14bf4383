"""The causal mask, as booleans and as a score term, against numpy's upper triangle."""

import numpy as np
import pytest
import torch

from invperm_interp.model.causal import causal_mask, mask_term


@pytest.mark.parametrize("T", [1, 2, 7])
def test_causal_mask_hides_exactly_the_later_keys(T):
    expected = np.triu(np.ones((T, T), dtype=bool), k=1)  # key j > query i
    np.testing.assert_array_equal(causal_mask(T).numpy(), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mask_term_is_minus_infinity_where_hidden_and_zero_elsewhere(dtype):
    mask = causal_mask(5)
    term = mask_term(mask, dtype)
    assert term.dtype == dtype and term.shape == (5, 5)
    assert torch.isneginf(term[mask]).all()
    assert (term[~mask] == 0).all() and not torch.signbit(term[~mask]).any()  # +0: bits kept


def test_adding_the_term_masks_like_masked_fill_and_keeps_every_visible_score_s_bits():
    scores = torch.randn(3, 2, 6, 6, generator=torch.Generator().manual_seed(0))
    mask = causal_mask(6)
    added = scores + mask_term(mask, scores.dtype)
    filled = scores.masked_fill(mask, float("-inf"))
    assert torch.equal(added, filled)
    assert torch.equal(torch.softmax(added, -1), torch.softmax(filled, -1))
