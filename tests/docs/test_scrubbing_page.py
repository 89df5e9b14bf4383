"""Every number docs/results/scrubbing.md quotes is recomputed here from the committed
assets/scrubbing.json and found, in its sentence, on the page."""

import math
import statistics

import pytest
from claims import load, page_text
from helpers import REPO

STYLES = ("zero", "mean", "resample", "scrub")


def text() -> str:
    return page_text("docs/results/scrubbing.md")


def share(k: int, n: int) -> str:
    """``"9 of 16 (33–77%"``: the count and its Wilson 95% interval, computed here."""
    p, z2 = k / n, 1.96 ** 2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = 1.96 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return f"{k} of {n} ({max(0.0, centre - half):.0%}–{min(1.0, centre + half):.0%}".replace(
        "%–", "–")


def fragments() -> list[str]:
    rows = load("scrubbing.json")
    n = len(rows)
    by = {c: [r for r in rows if r["claim"] == c] for c in
          ("theorem3_superposed_guarded", "theorem3_superposed", "theorem3_two_block_mass")}
    guarded, sup, mass = by.values()
    named = {s: sum(r["names"][s] not in ("none", "borderline") for r in rows) for s in STYLES}
    ties = sum(" = " in r["names"]["scrub"] for r in rows)
    mass_alone = sum(r["names"]["resample"] == "theorem3_two_block_mass" for r in mass)
    scrubbed = [r["scores"]["scrub"]["loss_recovered"] for r in rows]
    scrub_gain = {c: [r["patching"]["scrub"]["top"][0]["gain"] for r in by[c]] for c in by}
    family_gain = max(scrub_gain["theorem3_superposed_guarded"] + scrub_gain["theorem3_superposed"])
    res = [r["scores"]["resample"] for r in sup]
    res_guarded = [r["scores"]["resample"]["loss_recovered"] for r in guarded]
    guarded_gain = max(r["patching"]["resample"]["top"][0]["gain"] for r in guarded)
    top = [r["patching"]["resample"]["top"][0] for r in sup]
    assert {tuple(t["cell"]) for t in top} == {(0, 0, "x", "x")}
    others = max(abs(v) for r in sup for k, v in r["patching"]["resample"]["layer1_x_query"].items()
                 if k != "x")
    plus = {name: sum(r["resample_plus_content"][name]["verdict"] == "faithful" for r in rows)
            for name in rows[0]["resample_plus_content"]}
    without = {s: statistics.median(r["completeness"][s]["loss_recovered"] for r in rows)
               for s in STYLES}
    mean_mass = [r["completeness"]["mean"]["loss_recovered"] for r in mass]
    resampled = [r["completeness"]["resample"]["loss_recovered"] for r in rows]
    guard_zero = sum(r["with_guard"]["zero"]["verdict"] == "faithful" for r in rows)
    deep = [r["scrub_treeified"]["loss_recovered"] for r in rows]
    deep_named = sum(r["scrub_treeified"]["verdict"] == "faithful" for r in rows)
    deep_by = {c: sum(r["scrub_treeified"]["verdict"] == "faithful" for r in by[c]) for c in by}
    superposed = guarded + sup
    assert all(r["treeified_positional"]["cell"] == [0, 0, "pos.Y", "x"] for r in superposed)
    positional = [r["treeified_positional"]["gain"] for r in superposed]
    assert len(guarded) + len(sup) + len(mass) == n and ties == n  # scrubbing names ties only
    assert all(r["with_guard"][s]["verdict"] == "faithful" for r in rows for s in STYLES[1:])
    assert all(r["scores"]["mean"]["verdict"] == "faithful" for r in sup)
    found = [
        f"{len(guarded)} runs\nclaim `theorem3_superposed_guarded`, {len(sup)} `theorem3_superposed` "
        f"and {len(mass)} `theorem3_two_block_mass`",
        f"Zero ablation names {share(named['zero'], n)}), mean {share(named['mean'], n)};",
        f"resample {share(named['resample'], n)}; in the mass runs the mass form alone in "
        f"{mass_alone} of {len(mass)}, ranked by the paired difference on the same samples, and tied in "
        f"{len(mass) - mass_alone}), scrubbing {share(named['scrub'], n)}) but every one a tie",
        f"recovers {min(scrubbed):.3f}–{max(scrubbed):.3f} of the loss in {n} of {n} runs",
        f"no cell worth more than +{family_gain:.3f}"
        f" in the superposed runs and +{min(scrub_gain['theorem3_two_block_mass']):.3f} to "
        f"+{max(scrub_gain['theorem3_two_block_mass']):.3f} in\n  the mass runs",
        f"recovers {min(res_guarded):.3f}–{max(res_guarded):.3f} in the {len(guarded)} guarded runs (no "
        f"cell restored adds more\n  than +{guarded_gain:.4f})",
        f"{min(s['loss_recovered'] for s in res):.2f}–{max(s['loss_recovered'] for s in res):.2f} in "
        f"the {len(sup)} runs that claim `theorem3_superposed` (rows exact "
        f"{min(s['rows_exact'] for s in res):.0%}–{max(s['rows_exact'] for s in res):.0%}".replace("%–", "–"),
        f"+{min(t['gain'] for t in top):.3f} to +{max(t['gain'] for t in top):.3f}",
        f"recover at most +{others:.4f} each",
        f"`theorem3_superposed` and `theorem3_superposed_guarded` are faithful in "
        f"{share(plus['theorem3_superposed'], n)}",
        f"`theorem3` and `theorem3_complement` in {plus['theorem3']} of {n}",
        f"under zero ablation in {guard_zero} of\n  {n}.",
        f"median {without['zero']:.3f} under zero,\n  {without['mean']:.3f} under mean ablation "
        f"({min(mean_mass):.2f}–{max(mean_mass):.2f} in the mass runs), "
        f"−{-without['resample']:.3f} under resampling and scrubbing\n  "
        f"(−{-max(resampled):.2f} to −{-min(resampled):.2f}:",
        f"fails it in {n - guard_zero}.",
        f"the claim is faithful in {share(deep_named, n)}), recovering "
        f"{min(deep):.3f} to {max(deep):.3f} of the loss: `theorem3_two_block_mass` in "
        f"{deep_by['theorem3_two_block_mass']} of {len(mass)}, `theorem3_superposed_guarded` in "
        f"{deep_by['theorem3_superposed_guarded']} of {len(guarded)}, `theorem3_superposed` in "
        f"{deep_by['theorem3_superposed']} of {len(sup)}.",
        f"in each of the {len(guarded) + len(sup)} superposed runs, feeding layer 1's `(pos.Y, x)`",
        f"recovers +{min(g for g in positional):.3f} to +{max(positional):.3f} of the loss",
    ]
    return [" ".join(f.split()) for f in found]  # the page's whitespace is collapsed too


@pytest.mark.parametrize("index", range(17))
def test_the_scrubbing_page_quotes_the_committed_asset(index):
    assert fragments()[index] in text()


def test_every_fragment_is_checked():
    assert len(fragments()) == 17


def test_the_pages_choice_of_test_quotes_its_assets():
    """"Which test": the controls under resampling and scrubbing (assets/controls.json), and the runs
    where resampling rejects the claim, path patching names one cell and the claim with it passes."""
    summary = [s for s in load("controls.json")["summary"] if s["style"] in ("resample", "scrub")]

    def count(s, key):
        return tuple(int(x) for x in s[key].split(" (")[0].split(" of "))

    per_style = {}
    for s in summary:
        k, n = count(s, "empty claim rejected")
        assert k == n
        got = per_style.setdefault(s["style"], [0, 0, 0])
        got[0] += k
        got[1] += count(s, "random cell sets rejected")[0]
        got[2] += count(s, "random cell sets rejected")[1]
    (runs,) = {v[0] for v in per_style.values()}
    (draws,) = {v[2] for v in per_style.values()}
    assert (f"reject the empty claim ({runs} of {runs} each) and random cell sets "
            f"({per_style['resample'][1]:,} and {per_style['scrub'][1]:,} of {draws:,}; "
            "assets/controls.md)") in text()
    rows = load("scrubbing.json")
    failing = [r for r in rows if r["scores"]["resample"]["verdict"] != "faithful"]
    assert all(r["patching"]["resample"]["top"][0]["cell"] == [0, 0, "x", "x"] for r in failing)
    passes = sum(r["resample_plus_content"][r["claim"]]["verdict"] == "faithful" for r in failing)
    assert (f"names the one cell the claim lacks ({len(failing)} of {len(failing)}), and the claim with "
            f"that cell passes ({passes} of {len(failing)}).") in text()


def test_the_readme_quotes_the_recursive_scrub():
    from invperm_interp.analysis.controls import wilson

    rows = load("scrubbing.json")
    k = sum(r["scrub_treeified"]["verdict"] == "faithful" for r in rows)
    lo, hi = wilson(k, len(rows))
    sentence = (f"scrubbed to the bottom of the recursion (each claimed cell fed from its partner's run "
                f"scrubbed in turn), the claim is faithful in {k} of {len(rows)} ({lo:.0%}–{hi:.0%})")
    for page in ("README.md", "docs/index.md"):
        assert sentence in (REPO / page).read_text(), page
