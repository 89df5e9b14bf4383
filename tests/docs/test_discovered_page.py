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
