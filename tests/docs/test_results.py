"""Every number the README and the results pages quote is recomputed here from the committed
assets/ (tests/docs/claims.py) and found, in its sentence, on the page."""

import pytest
from claims import census, dynamics, fill, load
from helpers import REPO


def text(path: str) -> str:
    """The page with its whitespace collapsed, so a sentence may wrap anywhere."""
    return " ".join((REPO / path).read_text().split())


CENSUS = [
    "two-block in BI_TWO of BI_SOLVED solved runs, Appendix B in BI_APPB, `theorem2` in BI_T2, "
    "none in BI_NONE.",
    "a named form in SC_NAMED of SC_SOLVED solved runs (`theorem3_superposed` SC_SUP, "
    "`theorem3_two_block_mass` SC_MASS, `theorem3_superposed_complement` SC_COMP), SC_BORDER "
    "borderline, none in SC_NONE.",
    "two-block (TB_MEAN of TB_RUNS under mean, TB_RES under resampling)",
    "`theorem3_superposed_complement` (COMP_MEAN and COMP_RES of COMP_RUNS)",
    "`theorem3_superposed` keeps it under mean ablation in SUP_MEAN of SUP_RUNS but under "
    "resampling in SUP_RES;",
    "`theorem3_two_block_mass` under resampling in MASS_RES of MASS_RUNS but under mean ablation in "
    "MASS_MEAN;",
    "Appendix B under mean ablation in APPB_MEAN of APPB_RUNS and under resampling in APPB_RES.",
    "in SUP_NOT of SUP_RUNS runs the name does not survive resampling",
    "no named run of the committed census is a tie under zero ablation: TIES_BI bidirectional and "
    "TIES_SC causal-scratch runs (another construction is faithful too in ALSO_SC of the scratch runs",
]

DYNAMICS = [
    "0 of FAITHFUL_RUNS runs whose final circuit ever turns faithful",
    "(TB_RUNS of 32 bidirectional seeds) leaves the plateau at a median step TB_LEAVE, drops at "
    "TB_DROP and turns faithful at TB_FAITHFUL; its two cells form at the same checkpoint in "
    "TB_SAME runs.",
    "β reaches half-way at or after the run leaves the plateau in TB_AFTER two-block runs, and in "
    "ALL_AFTER runs of every mechanism.",
    "by a median TB_LEAD steps in two-block runs (TB_LEADS of them)",
    "a median SUP_SPREAD steps for `theorem3_superposed` (SUP_RUNS runs) and MASS_SPREAD for "
    "`theorem3_two_block_mass` (MASS_RUNS runs)",
    "the first cell forms a median MASS_FIRST steps before the drop",
    "form before its three lookup cells in MASS_GUARD runs;",
    "(its most common order in SUP_ORDER runs)",
]


@pytest.mark.parametrize("fragment", CENSUS)
def test_the_census_page_quotes_the_committed_census(fragment):
    assert fill(fragment, census()) in text("docs/results/census.md")


def test_the_census_page_says_what_each_style_can_tell_apart_as_the_registry_derives_it():
    from invperm_interp.analysis.ties import SIGNS, comparable, untold_pairs

    page = (REPO / "docs" / "results" / "census.md").read_text()
    for style in ("zero", "mean", "resample", "scrub"):
        pairs = [f"{a} ~ {b}" for group in (("plain", "bidirectional"), ("scratch", "causal"))
                 for a, b, r in untold_pairs(comparable(*group), style) if r == SIGNS]
        assert f"| {style} | {', '.join(pairs) or 'none'} | none |" in page


@pytest.mark.parametrize("fragment", DYNAMICS)
def test_the_dynamics_page_quotes_the_committed_dynamics(fragment):
    assert fill(fragment, dynamics()) in text("docs/results/dynamics.md")


def test_two_block_cells_forming_together_is_what_its_most_common_order_says():
    (row,) = [t for t in load("dynamics.json")["table"] if t["mechanism"] == "two_block"]
    assert "→" not in row["most common order of forming"]  # one group: the same checkpoint


def floor(d: int, readout: str) -> float:
    (row,) = [r for r in load("causal_floors.json")
              if (r["layout"], r["d"], r["readout"]) == ("[P; Y_P]", d, readout)]
    return row["floor"]


def construction(name: str, d: int = 10, beta: float = 100.0) -> dict:
    (row,) = [r for r in load("constructions.json")
              if (r["construction"], r["d"], r["beta"]) == (name, d, beta)]
    return row


def test_the_readme_numbers_come_from_the_assets():
    numbers = census()
    readme = text("README.md")
    assert f"exact floor d/4 ({floor(10, 'P'):g} at d = 10" in readme
    assert all(construction(f"{t}_as_printed")["max_error"] == 1.0 for t in ("theorem2", "theorem3"))
    assert "(max error 1 at d = 10" in readme
    assert fill("two-block circuit in BI_TWO of BI_SOLVED solved census runs", numbers) in readme
    assert fill("SC_NAMED of their SC_SOLVED solved runs run one of three registered", numbers) in readme


def test_the_readme_beyond_the_note_numbers_come_from_the_assets():
    readme = text("README.md")
    rows = load("standard.json")
    causal = [r for r in rows if r["model"].startswith("causal")]
    bidirectional = [r for r in rows if r["model"].startswith("bidirectional")]
    solved = [r for r in bidirectional if r["solved_at"] is not None]
    assert {r["floor"] for r in causal} == {2.5} and all(r["stopped"] == "causal_floor" for r in causal)
    top = max(r["excess_over_floor"] for r in causal)
    assert (f"all {len(causal)} causal runs sit on the floor 2.5 (at most +{top:.2g} above it) and "
            f"{len(solved)} of {len(bidirectional)} bidirectional runs solve") in readme
    page = (REPO / "assets" / "scrubbing.md").read_text()
    (resample,) = [line for line in page.splitlines() if line.startswith("| resample |")]
    _, _, _, alone, guarded, _ = [c.strip() for c in resample.split("|")[:6]]
    alone, guarded = alone.split(" (")[0], guarded.split(" (")[0]
    assert (f"claim alone is faithful under resample ablation in {alone}; with the layer-1 cells that "
            f"path patching finds, in {guarded}") in readme


def test_the_notes_page_numbers_come_from_the_assets():
    page = text("docs/results/note.md")
    printed = construction("theorem2_as_printed")
    assert construction("theorem3_as_printed")["mse"] == printed["mse"]
    assert f"max error {printed['max_error']:g} and MSE {printed['mse']:.3g} at d = 10" in page
    assert f"no causal model can beat d/4 ({floor(10, 'P'):g} at d = 10)" in page
    assert f"(d−1)/8 ({floor(10, 'Y'):g} at d = 10)" in page
    (causal,) = [r for r in load("learned_circuits.json") if r["run"] == "causal_seed0"]
    assert f"stops at MSE {causal['mse']:.4g} against the floor {causal['causal_floor']:g}" in page
    paper, adam = load("paper_vs_adam.json")
    assert (f"first goes below MSE 2.4 at step {paper['first_step_below_2.4']} and is at "
            f"{paper['final_mse']:.4g} after {paper['steps']:,} steps") in page
    assert f"below 1e-3 at step {adam['first_step_below_1e-3']}" in page
    best = {(r["model"], r["corruption"], r["layer_input"]): r["best_block"]
            for r in load("patching.json")}
    key = ("P changed, Y_P kept", "layer 2 (blocks.1) input")
    assert (f"is `{best[('two_block', *key)]}` for `two_block` and `{best[('theorem2', *key)]}` "
            "for `theorem2`") in page


def test_no_page_quotes_a_machines_load():
    for path in ["README.md", *(p.relative_to(REPO) for p in (REPO / "docs").rglob("*.md"))]:
        assert "load " not in text(str(path)), path
