"""The census over shapes as docs/shapes.md and the README quote it: every number recomputed from
the committed assets/census_shapes.json and found, in its sentence, on the page."""

from collections import Counter

import pytest
from claims import fill, load
from helpers import REPO


def text(path: str) -> str:
    """The page with its whitespace collapsed, so a sentence may wrap anywhere."""
    return " ".join((REPO / path).read_text().split())


def shapes() -> dict[str, int | str]:
    """Counts over the analysed runs (those with a record) of assets/census_shapes.json."""
    runs = load("census_shapes.json")["runs"]
    analysed = [r for r in runs if r["mechanism"] is not None]
    solved = [r for r in analysed if r["solved"]]
    named = [r for r in solved if r["mechanism"] not in ("none", "borderline")]
    unnamed = [r for r in solved if r not in named]
    roles = Counter(r["role"] for r in named)
    (split,) = [r for r in named if "(h0+h1)" in r["mechanism"]]
    return {
        "RUNS": len(runs), "ANALYSED": len(analysed), "MISSING": len(runs) - len(analysed),
        "SHAPES": len({(r["kind"], r["shape"]) for r in analysed}),
        "SOLVED": len(solved), "NAMED": len(named), "NONE": len(unnamed),
        "MASS": sum(r["construction"] == "theorem3_two_block_mass" for r in named),
        "SPLIT": roles["split"], "ALONE": roles["alone"], "COPIED": roles["copied"],
        "IDLE3": sum(3 in r["idle_layers"] for r in named),
        "NEEDED2": sum(len(r["needed_heads"]) == 2 for r in named),
        "EVERY": sum(len(r["needed_heads"]) == r["heads"] for r in unnamed),
        "NONE_FEWEST": min(len(r["needed_heads"]) for r in unnamed),
        "NONE_MOST": max(len(r["needed_heads"]) for r in unnamed),
        "MEAN_TB": sum(r["mean"].split(" @ ")[0] == "theorem3_two_block" for r in named),
        "RES_NONE": sum(r["resample"] == "none" for r in solved),
        "H0_KNOCK": f"{split['knockout_rows_exact']['L1h0']:.1%}",
        "H1_KNOCK": f"{split['knockout_rows_exact']['L1h1']:.1%}",
    }


PAGE = [
    "MISSING of the RUNS runs had no analysis record",
    "ANALYSED runs analysed, all causal scratch 3 × 2; SOLVED of them solved",
    "NAMED are named, both `theorem3_two_block_mass` (MASS of NAMED)",
    "NONE are none.",
    "roles: SPLIT split, ALONE alone, COPIED copied",
    "In IDLE3 of NAMED named runs layer 3 is idle",
    "NEEDED2 of NAMED named runs need exactly two heads",
    "Those runs need NONE_FEWEST to NONE_MOST of their six heads (EVERY of NONE need every head): "
    "they use all three layers.",
    "Under mean ablation MEAN_TB of NAMED are named `theorem3_two_block` instead; under resampling "
    "RES_NONE of SOLVED solved runs are named none.",
    "knocking out head 0 of layer 1 leaves H0_KNOCK of the rows exact and knocking out head 1 leaves "
    "H1_KNOCK.",
]


@pytest.mark.parametrize("fragment", PAGE)
def test_the_shapes_page_quotes_the_committed_census(fragment):
    assert fill(fragment, shapes()) in text("docs/shapes.md")


def test_the_readme_quotes_the_committed_census_over_shapes():
    readme = text("README.md")
    assert fill("ANALYSED of RUNS runs analysed", shapes()) in readme
    assert fill("NAMED of SOLVED solved 3 × 2 scratch runs", shapes()) in readme
    assert fill("layer 3 idle in IDLE3 of NAMED", shapes()) in readme


def test_no_layer_of_a_run_named_none_is_idle_as_the_page_says():
    runs = load("census_shapes.json")["runs"]
    unnamed = [r for r in runs if r["solved"] and r["mechanism"] in ("none", "borderline")]
    assert unnamed and all(r["idle_layers"] == [] for r in unnamed)
