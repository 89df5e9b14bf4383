"""docs/results/discovered.md quotes assets/discovery_census.json and the registry: its table is
the asset's summary, its construction facts the registered entry's."""

import pytest
from claims import load
from helpers import REPO

from invperm_interp.analysis.controls import wilson
from invperm_interp.maths import registry

PAGE = (REPO / "docs" / "results" / "discovered.md").read_text()
KINDS = {"bidirectional": "bidirectional", "scratch": "causal scratch"}


def share(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k} of {n} ({lo:.0%}–{hi:.0%})"


@pytest.mark.parametrize("row", load("discovery_census.json")["summary"],
                         ids=lambda r: f"{r['kind']}-{r['shape']}-{r['seeds']}")
def test_each_summary_row_is_in_the_page_table(row):
    n = row["solved"]
    shape = row["shape"].replace("x", " × ")
    line = (f"| {KINDS[row['kind']]} | {shape} | {row['seeds']} | {n} | "
            f"{share(row['named_without'], n)} | {share(row['named'], n)} |")
    assert line in PAGE, line


def test_the_page_describes_the_registered_construction_as_registered():
    found = [s for s in registry.REGISTRY.values() if s.provenance]
    assert [s.name for s in found] == load("discovery_census.json")["discovered"]
    for spec in found:
        assert f"`{spec.name}`" in PAGE
        assert f"reading `{spec.read_block}`" in PAGE
        assert f"from β = {spec.beta_exact:g} at every d from {spec.min_d} to {spec.max_d}" in PAGE
        runs = len(dict(spec.provenance)["runs"])
        assert f"faithful on {'five' if runs == 5 else runs} runs" in PAGE


def test_the_front_page_row_quotes_the_held_out_count():
    readme = (REPO / "README.md").read_text()
    (row,) = [r for r in load("discovery_census.json")["summary"]
              if (r["kind"], r["shape"], r["seeds"]) == ("bidirectional", "3x1", "held-out")]
    n = row["solved"]
    lo, hi = wilson(row["named"], n)
    assert (f"names {row['named']} of {n} held-out bidirectional 3 × 1 runs ({lo:.0%}–{hi:.0%}; "
            f"{row['named_without']} of {n} without it)") in readme
    zero = next(c for c in load("discovery_census.json")["controls"] if c["style"] == "zero")
    assert f"under zero ablation in {zero['claim_passes']} of {zero['runs']}" in readme


def test_the_shapes_page_counts_what_the_discovered_form_changes_on_the_census_configurations():
    """docs/shapes.md: on the held-out runs of every census configuration (assets/controls.json),
    the names the discovered constructions add and those they take from the note's forms, from
    each run's name with and without them."""
    runs = load("controls.json")["runs"]
    changed = [r for r in runs if r["names"]["zero"] != r["names"]["zero without discovered"]]
    taken = [r for r in changed if r["names"]["zero without discovered"] not in ("none", "borderline")]
    added = [r for r in changed if r not in taken]
    (kind, d), = {(r["kind"], r["d"]) for r in added}
    same = [r for r in runs if (r["kind"], r["d"]) == (kind, d)]
    page = " ".join((REPO / "docs" / "shapes.md").read_text().split())
    assert not taken
    assert (f"on the {len(runs)} held-out runs of every census configuration (`assets/controls.md`) "
            f"it names {len(added)} runs the note's forms left unnamed (of the {len(same)} "
            f"causal-scratch d = {d} runs) and takes no name from them") in page
