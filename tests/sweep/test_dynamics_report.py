"""analyses/dynamics.py: the committed dynamics.md is what its per-run rows make, and its two
timing columns are counted as their headers say, against the rows recomputed here."""

import json
import sys

import pytest
from helpers import REPO

DYNAMICS = json.loads((REPO / "assets" / "dynamics.json").read_text())


@pytest.fixture
def dynamics(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "analyses"))
    sys.modules.pop("dynamics", None)
    import dynamics

    return dynamics


def test_the_committed_dynamics_md_is_what_dynamics_json_makes(dynamics):
    assert dynamics.markdown(DYNAMICS["runs"], "dynamics") == (REPO / "assets" / "dynamics.md").read_text()
    assert dynamics.table(DYNAMICS["runs"]) == DYNAMICS["table"]


def test_beta_half_way_and_the_formation_spread_are_counted_from_the_runs():
    runs = [r for r in DYNAMICS["runs"] if r["mechanism"] == "two_block"]
    half = [r["drop"] - r["beta_half_lead"] for r in runs]
    after = sum(h >= r["leave"] for h, r in zip(half, runs))
    (row,) = [t for t in DYNAMICS["table"] if t["mechanism"] == "two_block"]
    assert row["β progress 0.5 at or after leaving"] == f"{after}/{len(runs)}"
    mass = [r for r in DYNAMICS["runs"] if r["mechanism"] == "theorem3_two_block_mass"]
    spreads = sorted(max(r["cells_formed"].values()) - min(r["cells_formed"].values()) for r in mass)
    (row,) = [t for t in DYNAMICS["table"] if t["mechanism"] == "theorem3_two_block_mass"]
    middle = len(spreads) // 2
    assert row["cells' formation spread (median)"] == (spreads[middle - 1] + spreads[middle]) / 2
