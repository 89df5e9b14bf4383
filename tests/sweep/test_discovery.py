"""analyses/discovery.py: the census's minimal cells are grouped with a layer's copies identified,
the forms it names are the registry's, and "before" is the same tests' name without them."""

import pytest
from helpers import analyses_script, scored

from invperm_interp.analysis.mechanism import name_by_rule
from invperm_interp.maths import registry


@pytest.fixture
def discovery(monkeypatch):
    return analyses_script(monkeypatch, "discovery")


def test_the_forms_it_recounts_are_the_registrys_guarded_forms(discovery):
    for name, base in discovery.FORMS.items():
        cells = registry.get(name).cells
        assert set(cells) == set(registry.get(base).cells) | set(discovery.GUARD)
        assert discovery.beta_exact()[name] == registry.get(name).beta_exact


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


def test_before_is_the_rules_name_from_the_same_tests_with_the_guarded_forms_left_out(discovery):
    from invperm_interp.maths.placement import Placement

    where = Placement("theorem3_superposed_guarded", (0, 1), (0, 0), (2, 2))
    tests = [scored(recovered=0.97, recovered_se=1e-3, placement=where),
             scored("theorem3_superposed_complement_guarded", recovered=0.96, recovered_se=1e-3),
             scored("theorem3_superposed", recovered=0.93, recovered_se=1e-3),
             scored("theorem3", recovered=0.50, recovered_se=1e-3)]
    placed = "theorem3_superposed_guarded @ L1h0→L2h0"
    assert discovery.as_list(name_by_rule(tests)) == ["faithful", placed, []]
    assert discovery.as_list(discovery.without_forms(tests)) == ["faithful", "theorem3_superposed", []]
    assert discovery.without_forms(tests[:2] + tests[3:]).verdict == "none"
