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
        words = {2: "two", 5: "five"}
        assert f"faithful on {words.get(runs, runs)} runs" in " ".join(PAGE.split())


def test_the_front_page_row_quotes_the_held_out_count():
    readme = (REPO / "README.md").read_text()
    (row,) = [r for r in load("discovery_census.json")["summary"]
              if (r["kind"], r["shape"], r["seeds"]) == ("bidirectional", "3x1", "held-out")]
    n = row["solved"]
    lo, hi = wilson(row["named"], n)
    assert (f"names {row['named']} of {n} held-out bidirectional 3 × 1 runs ({lo:.0%}–{hi:.0%}; "
            f"{row['named_without']} of {n} without it)") in readme
    (scratch,) = [r for r in load("discovery_census.json")["summary"]
                  if (r["kind"], r["shape"], r["seeds"]) == ("scratch", "3x1", "held-out")]
    n = scratch["solved"]
    assert (f"names {scratch['named_by_discovered']} of their {n} held-out runs ({scratch['named']} of "
            f"{n} named with it, {scratch['named_without']} without)") in readme
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


def test_the_scratch_mechanism_attends_as_the_page_says():
    """The page's reading of found_scratch_1x1_3a2b51, run: layer 2 takes scratch row i to the Y_P
    row whose P row holds e_i; layer 1 takes Y_P row j off P row j, onto the other P rows."""
    import torch

    from invperm_interp.maths import constructions as C
    from invperm_interp.task import sample_batch

    d, n = 5, 64
    model = C.build("found_scratch_1x1_3a2b51", d, 500.0)
    batch = sample_batch(model.cfg.layout, n, torch.Generator().manual_seed(0), dtype=torch.float64)
    _, cache = model.run_with_cache(batch.X)
    P_rows, Y_rows, S_rows = (model.cfg.layout.rows(name) for name in ("P", "Y", "S"))
    second = cache["blocks.1.attn.hook_pattern"][:, 0]  # (B, T, T)
    first = cache["blocks.0.attn.hook_pattern"][:, 0]
    want = Y_rows.start + batch.P.argmax(1)  # (B, d): the Y_P row whose P row holds e_i
    got = second[:, S_rows].argmax(-1)
    assert bool((got == want).all()) and float(second[:, S_rows].max(-1).values.min()) > 0.999
    own = torch.stack([first[:, Y_rows.start + j, P_rows.start + j] for j in range(d)])
    rest = first[:, Y_rows, P_rows].sum(-1)
    assert float(own.max()) < 1e-9 and float(rest.min()) > 1 - 1e-9
    page = " ".join(PAGE.split())
    assert (f"on {n} samples, layer 2's attention from scratch row `i` puts weight 1 on that Y_P row "
            f"in {n * d} of {n * d} cases") in page


def test_the_page_quotes_the_recursive_scrub_of_the_discovered_claims():
    deep = load("discovery_census.json")["treeified"]
    passes = [d for d in deep.values() if d["deep"] == "faithful"]
    lo, hi = wilson(len(passes), len(deep))
    page = " ".join(PAGE.split())
    assert (f"the claim is faithful on {len(passes)} of {len(deep)} ({lo:.0%}–{hi:.0%})".replace("%–", "–")
            in page)
    for name in sorted({d["claim"] for d in deep.values()}):
        mine = [d for d in deep.values() if d["claim"] == name]
        assert f"`{name}` on {sum(d['deep'] == 'faithful' for d in mine)} of {len(mine)}" in page
    assert f"against {sum(d['one'] == 'faithful' for d in deep.values())} at one level" in page
