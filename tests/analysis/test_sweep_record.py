"""The mechanism record: one format for ``analysis.json`` and a sweep's ``mechanism.json``, read
back into the same typed values; older ``analysis.json`` records read, a sweep's old flat record is
refused in one line saying how to regenerate it."""

import json

import pytest
from helpers import REPO, analysed, scored

from invperm_interp.analysis.hypothesis import AtomCell
from invperm_interp.analysis.mechanism import VERSION, Mechanism
from invperm_interp.analysis.sweep_record import SweepRecord

RUNS = REPO / "tests" / "data" / "reference_runs"
NAMES = ("bidirectional_d6_seed0", "scratch_d6_seed2")

SETTINGS = {"samples": 4096, "seed": 12345, "batches": 3, "mean_ablation": True,
            "resample_ablation": False}


def test_the_test_behind_each_styles_name_is_the_named_ones():
    tests = [scored("theorem2", recovered=0.5), scored("two_block", recovered=0.98)]
    record = analysed("two_block", tests=tests[::-1], mean="none")
    record = record.with_names({}, {"resample": tuple(tests)})
    assert record.named_test("zero") is record.mechanism.faithfulness
    assert record.named_test("resample").hypothesis == "two_block"
    assert record.named_test("resample").without.loss_recovered == 0.0
    assert record.named_test("mean") is None  # the style names none
    again = SweepRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert again == record and again.named_test("resample") == tests[1]


def test_a_sweep_record_reads_back_equal_through_json():
    record = analysed("two_block", tests=[scored(), scored("theorem2", rows=0.5)],
                      names=["two_block", "borderline", "two_block"], resample="none")
    again = SweepRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert again == record
    assert again.names_by_batch[1] == ("borderline", None, ()) and again.under["resample"] == (
        "none", None, ())
    assert json.loads(json.dumps(record.to_dict()))["under"]["resample"] == ["none", None, []]
    assert again.to_dict()["version"] == VERSION and again.batches == 3
    cell = again.mechanism.minimal.cells[1]
    assert isinstance(cell, AtomCell) and (cell.layer, cell.query, cell.label) == (1, "pos.P", "-1")
    assert cell.site == (1, 0, "pos.P", "L1.x")
    # stored as a list, not as text
    assert record.to_dict()["minimal"]["cells"][1] == [1, 0, "pos.P", "L1.x", "-1"]


def test_the_record_says_which_ablation_styles_a_grid_still_asks_for():
    record = analysed("two_block")
    assert record.lacks(SETTINGS) == []
    only_zero = SweepRecord(record.mechanism, 4096, 12345, record.names_by_batch)
    assert only_zero.lacks({**SETTINGS, "resample_ablation": True}) == ["mean", "resample"]
    assert only_zero.with_names({"resample": "none"}).under == {"resample": "none"}
    # a name kept without the tests behind it (an older record) is measured again
    names_only = SweepRecord(record.mechanism, 4096, 12345, record.names_by_batch, record.under)
    assert names_only.lacks(SETTINGS) == ["mean"]
    assert names_only.with_names({}, {"mean": record.tested_under["mean"]}).lacks(SETTINGS) == []
    assert record.lacks({**SETTINGS, "samples": 64}) is None  # measured otherwise: redo
    assert record.lacks({**SETTINGS, "batches": 1}) is None
    with pytest.raises(ValueError, match="ablation styles must be among"):
        SweepRecord(record.mechanism, 4096, 0, ("two_block",), {"zero": "two_block"})


@pytest.mark.parametrize("name", NAMES)
def test_an_analysis_json_of_version_2_still_reads(name):
    data = json.loads((RUNS / name / "analysis.json").read_text())["mechanism"]
    new = Mechanism.from_dict(data)
    # version 2 wrote the verdict as the name when it named no construction
    old = {**data, "version": 2, "name": str(new.answer),
           "minimal": {k: v for k, v in data["minimal"].items() if k != "candidates"}}
    mech = Mechanism.from_dict(old)
    assert mech.answer == new.answer and mech.tested == new.tested and mech.minimal.candidates == 0
    assert (new.name is None) == (name == "scratch_d6_seed2") and new.verdict in ("faithful", "none")
    assert mech.minimal.cells == new.minimal.cells and new.minimal.candidates > 0


def test_a_sweeps_flat_record_of_version_2_is_refused_in_one_line(tmp_path):
    flat = {"name": "two_block", "version": 2, "minimal_size": 2, "tested": [],
            "minimal_cells": ["L1 I at (pos.Y, pos.P)"], "samples": 4096, "seed": 0}
    path = tmp_path / "mechanism.json"
    path.write_text(json.dumps(flat))
    with pytest.raises(ValueError, match=r"invperm sweep GRID") as err:
        SweepRecord.read(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)
    newer = {**analysed("two_block").to_dict(), "version": VERSION + 1}
    with pytest.raises(ValueError, match="newer"):
        SweepRecord.from_dict(newer)


def test_discover_reuses_a_sweeps_record_measured_on_the_same_samples(tmp_path):
    from invperm_interp.cli.discover import _recorded
    from invperm_interp.runs.directory import RunDir

    record = analysed("none", samples=256, seed=0)
    RunDir(tmp_path).mechanism.write_text(json.dumps(record.to_dict()))
    assert _recorded(tmp_path, 256, 0) == record.mechanism
    assert _recorded(tmp_path, 4096, 0) is None and _recorded(tmp_path, 256, 1) is None
    RunDir(tmp_path).mechanism.write_text(json.dumps({"name": "none", "version": 2}))
    assert _recorded(tmp_path, 256, 0) is None  # an older record: measured again


def test_a_record_older_than_a_registered_construction_is_analysed_again():
    """``invperm discover --register`` adds a construction: a sweep run again re-analyses the
    records that never tested it, and only those that fit it."""
    from dataclasses import replace

    from invperm_interp.analysis.placements import fitting_names
    from invperm_interp.config import ModelConfig
    from invperm_interp.maths import constructions as C
    from invperm_interp.task import Layout

    cfg = ModelConfig(Layout.plain(6), n_layers=2, n_heads=1, attention_dir="bidirectional", readout="P")
    older = analysed("two_block")
    record = replace(older, registry=tuple(fitting_names(cfg, working=True)))
    assert record.untested(cfg) == [] and record.lacks(SETTINGS, cfg) == []
    assert SweepRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    C.register("_registered_later", C.get("theorem2").cells, C.Wiring(read="L2.x"), min_d=3, max_d=6)
    try:
        assert record.untested(cfg) == ["_registered_later"]
        assert record.lacks(SETTINGS, cfg) is None
        assert record.lacks(SETTINGS) == []  # without the config: as before
        # a record that did not keep its registry is read by the constructions it tested
        tested_all = replace(older, registry=None, mechanism=replace(
            older.mechanism, tested=tuple(scored(n) for n in fitting_names(cfg, working=True)
                                          if n != "_registered_later")))
        assert tested_all.untested(cfg) == ["_registered_later"]
        assert tested_all.lacks(SETTINGS, cfg) is None
        assert "_registered_later" in older.untested(cfg) and "two_block" not in older.untested(cfg)
        one_layer = ModelConfig(Layout.plain(6), n_layers=1, n_heads=1, attention_dir="bidirectional",
                            readout="P")
        assert record.untested(one_layer) == []  # a model it does not fit
    finally:
        C.REGISTRY.pop("_registered_later")


def test_the_answer_without_some_constructions_is_the_rules_on_the_other_tests():
    """What a run was named before the discovered constructions: the best of the other faithful
    tests, ``none`` when none is left, and untestable, as the record's own answer, where the empty
    claim is not rejected."""
    from dataclasses import replace

    from invperm_interp.analysis.faithfulness import Score
    from invperm_interp.analysis.verdict import Answer

    found = scored("found_x", recovered=0.99)
    record = analysed("found_x", tests=[found, scored("theorem3", recovered=0.9)])
    assert str(record.answer_without(set())) == "found_x"
    assert record.answer_without({"found_x"}) == Answer("faithful", "theorem3")
    assert str(record.answer_without({"found_x", "theorem3"})) == "none"
    accepting = replace(found, hypothesis="the empty claim", circuit=Score(0.01, 1.0, 0.99, 0.0, 0.01, 4096))
    untestable = replace(record, mechanism=replace(record.mechanism, empty=accepting))
    assert str(untestable.answer_without({"found_x"})) == "untestable"
