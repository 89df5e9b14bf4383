"""A construction in words: each cell's sentence follows from its blocks and template."""

import pytest

from invperm_interp.maths import constructions as C
from invperm_interp.maths.describe import block_words, cell_sentence, describe


def test_block_words_read_copies_from_the_inside_out():
    assert block_words("x") == "content"
    assert block_words("pos.Y") == "Y_P-row index"
    assert block_words("L1.pos.P") == "P-row index of the row attended in layer 1"
    assert block_words("L2h1.L1.x") == ("content of the row attended in layer 1 by the row "
                                        "attended in layer 2 head 1")
    with pytest.raises(ValueError, match="block must be a stream block name"):
        block_words("L1.y")


def test_each_template_and_sign_has_its_verb():
    assert "selects the key row whose content is the same one-hot" in cell_sentence(
        1, 0, "pos.P", "x", "I")
    assert "avoids" in cell_sentence(0, 0, "pos.Y", "pos.P", "-I")
    assert "reversed one-hot" in cell_sentence(0, 0, "pos.P", "pos.P", "J")
    assert "shifted by +1" in cell_sentence(0, 0, "pos.P", "pos.P", "shift+1")
    assert "lowers every key row with Y_P-row index" in cell_sentence(0, 0, "pos.P", "pos.Y", "-1")
    assert cell_sentence(1, 1, "pos.P", "x", "I", n_heads=2).startswith("layer 2 head 1: ")


def test_theorem2_reads_as_its_lookup_its_guard_and_its_fetch():
    lines = describe(C.get("theorem2"))
    assert len(lines) == len(C.get("theorem2").cells) + 1
    assert lines[0].startswith("layer 1: a query row's P-row index selects the key row whose content")
    assert lines[1].startswith("layer 1: a query row with P-row index lowers")  # the guard after
    assert lines[-1] == ("read-out: each of the P rows outputs the content of the row attended in "
                         "layer 2 (the answer Y_i at row i)")
