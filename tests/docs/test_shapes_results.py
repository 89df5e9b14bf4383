"""The census over shapes as docs/shapes.md and the README quote it: every number recomputed from
the committed assets/census_shapes.json and found, in its row or sentence, on the page."""

from collections import Counter

import pytest
from claims import fill, load
from claims import page_text as text

KINDS = {"bidirectional": "bidirectional", "scratch": "causal scratch"}


def _names(counts: dict[str, int]) -> str:
    """Names by construction, placements summed: ``theorem3_two_block_mass 2, none 1``."""
    by = Counter()
    for name, n in counts.items():
        by[name.split(" @ ")[0]] += n
    return ", ".join(f"{k} {v}" for k, v in sorted(by.items(), key=lambda kv: (-kv[1], kv[0])))


def shape_rows() -> list[str]:
    """One table row per model and shape with a run analysed, as docs/shapes.md prints them."""
    rows = []
    for s in load("census_shapes.json")["summary"]:
        if not s["analysed"]:
            continue
        rows.append(" | ".join([
            f"| {KINDS[s['model']]}", s["shape"].replace("x", " × "), f"{s['analysed']} of {s['runs']}",
            str(s["solved"]), s["named"], s["none"], _names(s["names"]) or "–",
            _names(s["mean"]) or "–", _names(s["resample"]) or "–", s["idle_layer"]]) + " |")
    return rows


def totals() -> dict[str, int]:
    runs = load("census_shapes.json")["runs"]
    analysed = [r for r in runs if r["mechanism"] is not None]
    solved = [r for r in analysed if r["solved"]]
    named = [r for r in solved if r["mechanism"] not in ("none", "borderline")]
    return {"RUNS": len(runs), "ANALYSED": len(analysed), "SOLVED": len(solved),
            "NAMED": len(named), "PAIRS": len({(r["kind"], r["shape"]) for r in analysed})}


@pytest.mark.parametrize("row", shape_rows())
def test_the_shapes_page_quotes_each_shape_of_the_committed_census(row):
    assert " ".join(row.split()) in text("docs/shapes.md")


def test_the_shapes_page_and_the_readme_quote_the_totals():
    assert fill("ANALYSED of the RUNS runs had an analysis record", totals()) in text("docs/shapes.md")
    assert fill("ANALYSED of RUNS runs analysed", totals()) in text("README.md")


def test_the_readme_quotes_the_census_over_shapes():
    runs = [r for r in load("census_shapes.json")["runs"] if r["mechanism"] is not None]
    solved = lambda kind, shape: [r for r in runs if r["solved"] and (kind is None or r["kind"] == kind)  # noqa: E731
                                  and r["shape"] == shape]
    is_named = lambda name: name not in ("none", "borderline")  # noqa: E731
    bi22 = solved("bidirectional", "2x2")
    three1, three2 = solved(None, "3x1"), solved(None, "3x2")
    two1 = {k: f"{sum(is_named(r['mechanism']) for r in solved(k, '2x1'))} of {len(solved(k, '2x1'))}"
            for k in ("bidirectional", "scratch")}
    values = {
        "BI21": two1["bidirectional"], "SC21": two1["scratch"],
        "SUMS": sum(is_named(r["mechanism"]) and "(h0+h1)" in r["mechanism"] for r in bi22),
        "NAMED22": sum(is_named(r["mechanism"]) for r in bi22),
        "MEAN22": sum(is_named(r["mean"]) for r in bi22),
        "RES22": sum(is_named(r["resample"]) for r in bi22), "N22": len(bi22),
        "N31": len(three1), "NAMED31": sum(is_named(r["mechanism"]) for r in three1),
        "N32": len(three2), "NAMED32": sum(is_named(r["mechanism"]) for r in three2),
    }
    fragment = ("reproduce the census (BI21 and SC21 named, bidirectional and causal scratch); with two "
                "heads per layer SUMS of NAMED22 named bidirectional runs are named on sums of heads, "
                "and under mean and resample "
                "ablation MEAN22 and RES22 of N22 are named; with three layers the registry of then, "
                "before discovery, named NAMED31 of N31 solved runs of one head per layer and NAMED32 "
                "of N32 of two (with the two discovered constructions")
    assert fill(fragment, values) in text("README.md")


def test_every_shape_the_page_reports_was_analysed():
    assert shape_rows() and len(shape_rows()) == totals()["PAIRS"]


def findings() -> dict[str, int | str]:
    """The counts the page's bullets quote, from the per-run rows."""
    runs = [r for r in load("census_shapes.json")["runs"] if r["mechanism"] is not None]

    def cell(kind, shape):
        return [r for r in runs if r["kind"] == kind and r["shape"] == shape]

    named = lambda rs: [r for r in rs if r["solved"] and r["mechanism"] not in ("none", "borderline")]  # noqa: E731
    bi22 = named(cell("bidirectional", "2x2"))
    bi32 = [r for r in cell("bidirectional", "3x2") if r["solved"]]
    l2 = sum(h in r["needed_heads"] for r in bi32 for h in ("L2h0", "L2h1"))
    (split,) = [r for r in named(cell("scratch", "3x2")) if "(h0+h1)" in r["mechanism"]]
    sc31 = [r for r in cell("scratch", "3x1") if r["solved"]]
    idle31 = [r for r in sc31 if r["idle_layers"] == [3]]
    unnamed = ("none", "borderline")
    return {
        "IDLE31": len(idle31), "SC31": len(sc31),
        "ZERO31": sum(r["mechanism"] not in unnamed for r in idle31),
        "MEAN31": sum(r["mean"] not in unnamed for r in idle31),
        "RES31": sum(r["resample"] not in unnamed for r in idle31),
        "SUMS_APPB": sum(r["mechanism"] == "appendix_b @ L1(h0+h1)→L2(h0+h1)" for r in bi22),
        "SUMS_TB": sum(r["mechanism"] == "two_block @ L1(h0+h1)→L2(h0+h1)" for r in bi22),
        "NAMED22": len(bi22), "SPLIT22": sum(r["role"] == "split" for r in bi22),
        "IDLE32": sum(bool(r["idle_layers"]) for r in bi32), "BI32": len(bi32),
        "L2NEEDED": l2, "KNOCKS": 2 * len(bi32),
        "H0": f"{split['knockout_rows_exact']['L1h0']:.1%}",
        "H1": f"{split['knockout_rows_exact']['L1h1']:.1%}",
    }


FINDINGS = [
    "SUMS_APPB of the NAMED22 named bidirectional 2 × 2 runs are named on the sums of both layers' "
    "heads (`appendix_b @ L1(h0+h1)→L2(h0+h1)`, and SUMS_TB more `two_block` on the same sums), and "
    "SPLIT22 of the NAMED22 are split.",
    "In IDLE32 of BI32 bidirectional 3 × 2 runs a layer is idle",
    "its heads are needed in L2NEEDED of KNOCKS knock-outs",
    "knocking out head 0 of layer 1 leaves H0 of the rows exact and head 1 H1",
    "In IDLE31 of the SC31 solved scratch 3 × 1 runs layer 3 is idle",
    "names the superposed form at `L1→L2` in MEAN31 of the IDLE31, and resampling in RES31.",
]


def test_the_readme_quotes_the_idle_layer_that_zero_ablation_misses():
    f = findings()
    assert f["ZERO31"] == 0  # the sentence says zero ablation names none of them
    assert fill("In IDLE31 of SC31 solved causal-scratch 3 × 1 runs layer 3 is idle, and zero "
                "ablation with that registry named none of them", f) in text("README.md")


@pytest.mark.parametrize("fragment", FINDINGS)
def test_the_shapes_page_findings_are_the_committed_census(fragment):
    assert fill(fragment, findings()) in text("docs/shapes.md")


def test_the_cost_of_a_wide_analysis_is_the_benchmarks():
    """The README's and docs/shapes.md's 3 x 2 / 2 x 1 ratios are assets/analysis_cost.json's."""
    cost = load("analysis_cost.json")
    rows = {r["construction"]: r for r in cost["rows"]}
    t2, t3 = (f"{rows[n]['ratio']:.1f}×" for n in ("theorem2", "theorem3"))
    cpu = cost["cpu"]  # the ratio depends on it: the pages name it
    assert f"costs {t3} (theorem3) to {t2} (theorem2) a 2 × 1 one on an {cpu}" in text("README.md")
    assert (f"now takes {t3} the 2 × 1 one for theorem3 and {t2} for theorem2 on an {cpu}"
            in text("docs/shapes.md"))
