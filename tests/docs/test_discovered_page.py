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
