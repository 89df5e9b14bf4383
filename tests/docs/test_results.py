"""Every number the README and the results pages quote is recomputed here from the committed
assets/ (tests/docs/claims.py) and found, in its sentence, on the page."""

import re

import pytest
from claims import census, discovery, dynamics, dynamics_fine, fill, guarded, load, wilson
from claims import page_text as text
from helpers import REPO

CENSUS = [
    "two-block in BI_TWO of BI_SOLVED solved runs, Appendix B in BI_APPB, `theorem2` in BI_T2, "
    "none in BI_NONE.",
    "a named form in SC_NAMED of SC_SOLVED solved runs (`theorem3_two_block_mass` SC_MASS, "
    "`theorem3_superposed` SC_SUP, `theorem3_superposed_guarded` SC_SUPG, "
    "`theorem3_superposed_complement_guarded` SC_COMPG, `theorem3_superposed_complement` SC_COMP, "
    "and a superposed form tied with its guarded twin in SC_TIED), SC_BORDER borderline, none in "
    "SC_NONE.",
    "in BATCH_TIES runs the batches differ between a superposed form and its tie with its guarded "
    "twin (two batches of three report the tie in TIES_TWO, one in TIES_ONE)",
    "two-block (TB_MEAN of TB_RUNS under mean, TB_RES under resampling) and "
    "`theorem3_superposed_guarded` (SUPG_MEAN and SUPG_RES of SUPG_RUNS) keep their names",
    "Appendix B under mean ablation in APPB_MEAN of APPB_RUNS and under resampling in APPB_RES.",
    "`theorem3_two_block = theorem3_two_block_mass` in MASS_TIE_MEAN of MASS_RUNS runs under mean and "
    "MASS_TIE_RES under resample ablation.",
    "of its SUP_RUNS runs, mean ablation names the guarded form alone in SUP_TO_G_MEAN and keeps the "
    "plain name in SUP_MEAN; resampling names the guarded form alone in SUP_TO_G_RES and keeps the "
    "plain name in SUP_RES.",
    "is the tie of the two in COMPG_TIE_MEAN of COMPG_RUNS runs under mean and COMPG_TIE_RES under "
    "resample ablation.",
    "under zero ablation TIES_BI bidirectional and TIES_SC causal-scratch named runs are ties "
    "(another construction is faithful too in ALSO_SC of the scratch runs",
    "under mean ablation TIES_BI_MEAN and TIES_SC_MEAN, under resample ablation TIES_BI_RES and "
    "TIES_SC_RES",
    "Under resample ablation, the headline test ([scrubbing](scrubbing.md)), SC_NONE_RES solved "
    "causal-scratch runs stay unnamed; under mean ablation SC_NONE_MEAN.",
]

GUARDED = [
    "| zero | G_ZER_WITH | G_ZER_WITHOUT |", "| mean | G_MEA_WITH | G_MEA_WITHOUT |",
    "| resample | G_RES_WITH | G_RES_WITHOUT |",
    "Without the guarded forms the same tests give what the census gave before they were registered "
    "(G_ZER_WITHOUT_NAMED named under zero ablation, G_ZER_WITHOUT_NONE none).",
    "where it left G_RES_WITHOUT_NONE.",
    "a little of the loss (KEEP_LO to KEEP_HI by configuration), under resampling it does worse than "
    "the baseline (RES_HI to RES_LO)",
    "by a median GAIN_MEAN_MED (at most GAIN_MEAN_MAX) under mean ablation and a median GAIN_RES_MED "
    "(at most GAIN_RES_MAX) under resampling.",
]

DISCOVERY = [
    "The D_NONE solved causal-scratch runs the rule calls 'none' hold D_FORMS minimal-circuit cell "
    "sets once a layer's copies are identified",
    "D_SHARED of them held by more than one run (D_SHARED_RUNS runs). D_HOLD7 of the D_NONE hold at "
    "least 7 of the 9 cells of `theorem3_superposed` as recorded;",
    "`(x, pos.P)`, in D_XP runs (`(x, pos.Y)` in D_XY): superposed circuits,",
    "| zero | R_ZER_BEFORE | R_ZER_NOW | R_ZER_GUARDED | R_ZER_TIES | R_ZER_WITHOUT |",
    "| mean | R_MEA_BEFORE | R_MEA_NOW | R_MEA_GUARDED | R_MEA_TIES | R_MEA_WITHOUT |",
    "| resample | R_RES_BEFORE | R_RES_NOW | R_RES_GUARDED | R_RES_TIES | R_RES_WITHOUT |",
    "median loss recovered without the named circuit (all R_ALL runs)",
    "the guarded superposed form alone names R_RES_WILSON, the plain one",
    "it leaves R_RES_LEFT where the registry without the guarded forms left R_RES_BEFORE_LEFT",
    "the widest, B_WIDEST's, runs B_WIDE runs, and the R_ALL circuits run B_SETS different sets",
]


def test_the_census_pages_reading_of_the_discovery_runs_is_what_their_names_say():
    runs = load("discovery.json")["runs"]
    none = [r for r in runs if r["before"]["zero"][0] == "none"]
    resample = [r["names"]["resample"] for r in none]
    guarded = sum(n[1] == "theorem3_superposed_guarded" and not n[2] for n in resample)
    family = sum(bool(n[1]) and {n[1], *n[2]} <= {"theorem3_superposed", "theorem3_superposed_guarded"}
                 for n in resample)
    assert f"form alone names {guarded} of the" in text("docs/results/census.md")
    assert f"the plain one or a tie of the two {family - guarded} more" in text("docs/results/census.md")
    left = ["scratch_d6_seed9", "scratch_d10_seed1"]
    assert [r["run"] for r in none if r["names"]["resample"][1] is None] == left
    assert all(r["names"][s][1] is None for r in none if r["run"] in left
               for s in ("zero", "mean", "resample"))
    census = {r["run"]: r for r in load("census.json")["runs"]}
    assert all({census[run][k] for k in ("mechanism", "name_mean_ablation", "name_resample_ablation")}
               == {"none"} for run in left)  # 'none' under every style in the census too
    (twin,) = [r["names"]["resample"] for r in none if r["run"] == "scratch_d10_seed58"]
    assert {twin[1], *twin[2]} == {"theorem3_superposed_complement",
                                   "theorem3_superposed_complement_guarded"}
    mass = [r for r in runs if r["before"]["zero"][1] == "theorem3_two_block_mass"]
    assert len(mass) == 2 and all(
        {r["names"][s][1], *r["names"][s][2]} == {"theorem3_two_block", "theorem3_two_block_mass"}
        for r in mass for s in ("mean", "resample"))

DYNAMICS = [
    "0 of FAITHFUL_RUNS runs whose final circuit ever turns faithful",
    "(TB_RUNS of 32 bidirectional seeds) leaves the plateau at a median step TB_LEAVE, drops at "
    "TB_DROP and turns faithful at TB_FAITHFUL; its two cells form at the same checkpoint in "
    "TB_SAME runs.",
    "β reaches half-way at or after the run leaves the plateau in TB_AFTER two-block runs, and in "
    "ALL_AFTER runs of every mechanism.",
    "by a median TB_LEAD steps in two-block runs (TB_LEADS of them)",
    "a median SUPG_SPREAD steps for `theorem3_superposed_guarded` (SUPG_RUNS runs), SUP_SPREAD for "
    "`theorem3_superposed` (SUP_RUNS runs) and MASS_SPREAD for `theorem3_two_block_mass` (MASS_RUNS runs)",
    "the guard's `(x, x)` cell is the first to form** in XX_FIRST runs, at steps XX_STEPS, a median "
    "SUPG_FIRST steps before the drop;",
    "the first cell forms a median MASS_FIRST steps before the drop",
    "form before its three lookup cells in MASS_GUARD runs,",
    "where the 25-step checkpoints put them together in TB_SAME.",
    "(its most common order in SUP_ORDER runs)",
]

DYNAMICS_FINE = [
    "(every 10 or 15 in a window longer than 400 steps: FINE_AT5 of FINE_RUNS runs are at 5)",
    "the replays met FINE_MET stored checkpoints bit for bit",
    "**Still no final circuit is faithful before the drop**: FINE_BEFORE runs; FINE_AT_DROP turn faithful",
    "β half-way leads the drop by a median TB5_LEAD steps (TB5_LEAD_CI) in TB5_LEADS runs**",
    "comes a median TB5_AFTER steps (TB5_AFTER_CI) after the run leaves the plateau, in TB5_AFTERS",
    "β is half-way at or after leaving in FINE_ALL_AFTER runs",
    "reaches a tenth of its progress a median TB5_EARLY steps (TB5_EARLY_CI) before the loss leaves the "
    "plateau, in TB5_EARLIES two-block runs",
    "a median TB5_SPREAD steps apart (TB5_SPREAD_CI), at the same 5-step mark in TB5_TOGETHER runs",
    "form over a median SUPG5_SPREAD steps (SUPG5_SPREAD_CI) and its β is half-way SUPG5_LEAD steps "
    "(SUPG5_LEAD_CI)",
    "`theorem3_two_block_mass`'s over MASS5_SPREAD steps (MASS5_SPREAD_CI), and its β is half-way only "
    "MASS5_LEAD steps (MASS5_LEAD_CI) before the drop",
    "the three lookup cells form MASS5_LOOKUP_FIRST to MASS5_LOOKUP_LAST steps before the drop, within "
    "MASS5_LOOKUP_SPREAD steps of one another;",
    "its three lookup cells MASS5_LOOKUP_FIRST to MASS5_LOOKUP_LAST steps before the drop, within "
    "MASS5_LOOKUP_SPREAD steps of one another,",
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


@pytest.mark.parametrize("fragment", GUARDED)
def test_the_census_page_quotes_what_the_guarded_forms_add(fragment):
    assert fill(fragment, guarded()) in text("docs/results/census.md")


@pytest.mark.parametrize("fragment", DISCOVERY)
def test_the_census_page_quotes_the_discovery_report(fragment):
    assert fill(fragment, discovery()) in text("docs/results/census.md")


@pytest.mark.parametrize("fragment", DYNAMICS)
def test_the_dynamics_page_quotes_the_committed_dynamics(fragment):
    assert fill(fragment, dynamics()) in text("docs/results/dynamics.md")


@pytest.mark.parametrize("fragment", DYNAMICS_FINE)
def test_the_dynamics_page_quotes_the_dynamics_at_5_steps(fragment):
    assert fill(fragment, dynamics_fine()) in text("docs/results/dynamics.md")


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


def printed_forms_by_d() -> tuple[list[int], list[int]]:
    """The d at which Theorem 2 and 3 as printed are exact (max error < 1e-6 at β = 100) and those at
    which they fail (max error 1), from assets/constructions.json; every tested d is one or the other."""
    rows = [r for r in load("constructions.json")
            if r["construction"] in ("theorem2_as_printed", "theorem3_as_printed") and r["beta"] == 100.0]
    exact = sorted({r["d"] for r in rows if r["max_error"] < 1e-6})
    failing = sorted({r["d"] for r in rows if r["max_error"] == 1.0})
    assert len(exact) == 1 and len(failing) == 3 and 10 in failing  # the pages name them one by one
    assert all({r["d"] for r in rows if r["construction"] == name} == set(exact) | set(failing)
               for name in ("theorem2_as_printed", "theorem3_as_printed"))
    assert all(not any(r["d"] == d and r["max_error"] == 1.0 for r in rows) for d in exact)
    return exact, failing


def test_the_readme_numbers_come_from_the_assets():
    numbers = census()
    readme = text("README.md")
    assert f"exact floor d/4 ({floor(10, 'P'):g} at d = 10" in readme
    assert all(construction(f"{t}_as_printed")["max_error"] == 1.0 for t in ("theorem2", "theorem3"))
    assert "(max error 1 at d = 10" in readme
    exact, failing = printed_forms_by_d()
    assert (f"do not work past d = {exact[-1]} (max error 1 at d = 10, as at d = {failing[0]} and "
            f"{failing[-1]}; of the d tested, only at d = {exact[0]} are they exact") in readme
    assert fill("two-block circuit in BI_TWO of BI_SOLVED solved census runs", numbers) in readme
    scratch = [r for r in load("census.json")["runs"]
               if r["kind"] == "scratch" and r["steps_to_target"] is not None]
    forms = {n for r in scratch for n in r["mechanism"].split(" = ")} - {"none", "borderline"}
    guarded = {n for n in forms if n.endswith("_guarded")}
    words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
    assert fill(f"in SC_NAMED of their SC_SOLVED solved runs the rule names one of {words[len(forms)]} "
                "registered circuits", numbers) in readme
    unnamed = sum(r["name_resample_ablation"] in ("none", "borderline") for r in scratch)
    assert all(r["name_resample_ablation"] != "borderline" for r in scratch)  # "(all 'none')"
    assert (f"{words[len(guarded)]} carry a layer-1 content guard found in the runs the other "
            f"{words[len(forms - guarded)]} left unnamed") in readme
    # not named = 'none' and borderline, both counted (the rule names neither)
    assert fill(f"and with them {numbers['SC_NONE'] + numbers['SC_BORDER']} of the SC_SOLVED stay "
                "unnamed by the rule (SC_NONE 'none', SC_BORDER borderline) and "
                f"{unnamed} under resample ablation (all 'none')", numbers) in readme


def test_the_readme_beyond_the_note_numbers_come_from_the_assets():
    readme = text("README.md")
    result = load("standard.json")
    reads = {r: [g for g in result["floor_groups"] if g["readout"] == r] for r in ("P", "Y")}
    assert {g["floor"] for g in reads["P"]} == {floor(10, "P")}
    assert {g["floor"] for g in reads["Y"]} == {floor(10, "Y")}
    assert sum(g["below_floor"] for g in result["floor_groups"]) == 0
    solve = {(g["setting"], g["architecture"]): g["solved_text"] for g in result["solve_groups"]}
    longs = result["long_groups"]
    assert (f"all {sum(g['runs'] for g in reads['P'])} causal runs reading `P` (attention-only or "
            f"with LayerNorm and MLPs, `d_model` 32 to 128) end within "
            f"{max(g['excess_max'] for g in reads['P']):.2g} above the exact floor d/4 and none below "
            f"it; the {sum(g['runs'] for g in reads['Y'])} reading `Y_P` end "
            f"{min(g['excess_min'] for g in reads['Y']):.2g} to "
            f"{max(g['excess_max'] for g in reads['Y']):.2g} above (d−1)/8 after 400 steps, none below, "
            f"and {sum(g['runs'] for g in longs)} of them continued to {result['long_steps']:,} "
            f"steps reach it in {sum(g['at_floor'] for g in longs)}; "
            f"bidirectional attention-only runs solve in {solve[('bidirectional', 'attention-only')]} "
            f"and causal scratch ones in {solve[('scratch', 'attention-only')]}") in readme
    page = (REPO / "assets" / "scrubbing.md").read_text()
    (resample,) = [line for line in page.splitlines() if line.startswith("| resample |")]
    _, _, _, alone, guarded, _ = [c.strip() for c in resample.split("|")[:6]]
    rows = load("scrubbing.json")
    failing = [r for r in rows if r["scores"]["resample"]["verdict"] != "faithful"]
    assert all(r["patching"]["resample"]["top"][0]["cell"] == [0, 0, "x", "x"] for r in failing)
    assert len(failing) == len(rows) - int(alone.split(" of ")[0])
    assert (f"claim alone is faithful under resample ablation in {alone}; with the three layer-1 "
            "content-query cells added (path patching under resampling finds one of them, `(x, x)`, "
            f"as the top missing cell in each of the {len(failing)} runs where the claim fails), in "
            f"{guarded}") in readme
    ties = sum(" = " in r["names"]["scrub"] and len(r["names"]["scrub"].split(" = ")) == 2 for r in rows)
    assert ties == len(rows)
    assert f"Scrubbing names all {len(rows)}, each as a tie of two forms;" in readme


def test_the_notes_page_numbers_come_from_the_assets():
    page = text("docs/results/note.md")
    printed = construction("theorem2_as_printed")
    assert construction("theorem3_as_printed")["mse"] == printed["mse"]
    assert f"max error {printed['max_error']:g} and MSE {printed['mse']:.3g} at d = 10" in page
    exact, failing = printed_forms_by_d()
    tiny = max(r["max_error"] for r in load("constructions.json")
               if r["construction"] in ("theorem2_as_printed", "theorem3_as_printed")
               and r["beta"] == 100.0 and r["d"] in exact)
    assert (f"as at d = {failing[0]} and {failing[-1]}; of the d the table tests, only at d = {exact[0]} "
            f"are they exact (max error {tiny:.3g} at β = 100)") in page
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


def test_the_readmes_set_up_and_demo_numbers_are_the_codes():
    """The torch pin, the Python version and the demo's models (d, steps, recipe) the README names
    are those of the Makefile, pyproject.toml and `invperm demo`."""
    from invperm_interp.cli.main import build_parser
    from invperm_interp.config import TrainConfig
    from invperm_interp.sweep.grid import tomllib

    readme = text("README.md")
    (pin,) = set(re.findall(r"torch==[\d.]+", (REPO / "Makefile").read_text()))
    assert readme.count(pin) == 2 and len(set(re.findall(r"torch==[\d.]+", readme))) == 1
    python = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert f"Only Python ≥ {python.removeprefix('>=')} is needed" in readme
    demo = build_parser().parse_args(["demo"])
    recipe = TrainConfig(steps=1).resolved().optimizer
    assert (f"the note's two models (bidirectional and causal, d = {demo.d}, {demo.steps:,} "
            f"{recipe.capitalize()} steps each)") in readme


#: The front page's newcomer tasks: the row of its "to … read" table, and what the pages it links
#: must hold between them (the second click lands on it).
NEWCOMER_TASKS = {
    "train and analyse one model": ["invperm train", "invperm analyze"],
    "run a sweep, locally or on Slurm": ["invperm sweep", "--executor slurm", "[slurm]"],
    "read the census": ["assets/census.md", "census.png"],
    "use TransformerLens tools on a model": ["run_with_cache", "to_transformer_lens"],
}


@pytest.mark.parametrize("task", NEWCOMER_TASKS)
def test_the_front_page_reaches_each_newcomer_task_in_two_clicks(task):
    (row,) = [line for line in (REPO / "README.md").read_text().splitlines()
              if line.startswith(f"| {task} |")]
    pages = [REPO / link for link in re.findall(r"\]\(([^)#]+\.md)\)", row)]
    assert pages and all(p.is_file() for p in pages), row
    held = " ".join(p.read_text() for p in pages)
    assert all(needed in held for needed in NEWCOMER_TASKS[task]), (task, pages)


def test_every_link_on_the_front_page_resolves():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", (REPO / "README.md").read_text())
    assert len(links) > 10
    assert [link for link in links if not link.startswith("http") and not (REPO / link).exists()] == []


def test_the_standard_pages_floor_tables_come_from_its_asset():
    """docs/standard.md's tables of causal runs against the floor (and of the longer Y_P runs, when
    the asset has them) are assets/standard.json's groups."""
    result, page = load("standard.json"), text("docs/standard.md")

    def row(g):
        reads = "`Y_P`" if g["readout"] == "Y" else f"`{g['readout']}`"
        return (f"| {reads} ({g['floor']:g}) | {g['architecture']} | {g['d_model']} | {g['runs']} | "
                f"{g['at_floor']} | {g['excess_min']:+.2g} / {g['excess_median']:+.2g} / "
                f"{g['excess_max']:+.2g} | {g['below_floor']} |")

    for g in result["floor_groups"]:
        assert row(g) in page, row(g)
    for g in result.get("long_groups", []):
        runs = sorted((r for r in result["long_runs"] if r["architecture"] == g["architecture"]),
                      key=lambda r: r["seed"])
        steps = ", ".join(f"{r['steps']:,}" for r in runs)  # at the floor or at the limit
        assert {r["d_model"] for r in runs} == {64}
        long_row = (f"| `Y_P` ({g['floor']:g}) | {g['architecture']} | "
                    f"{g['runs']} | {g['at_floor']} | {steps} | {g['excess_min']:+.2g} / "
                    f"{g['excess_median']:+.2g} / {g['excess_max']:+.2g} | {g['below_floor']} |")
        assert long_row in page, long_row


def test_the_standard_census_numbers_come_from_its_asset():
    """docs/standard.md's census table and the README's sentence, from assets/census_standard.json."""
    summary = {(s["model"], s["d"], s["architecture"]): s for s in load("census_standard.json")["summary"]}
    page = text("docs/standard.md")
    labels = {"bidirectional": "bidirectional", "scratch": "causal scratch"}
    standard_ds = {d for (_, d, arch) in summary if arch.startswith("standard")}
    for (kind, d, arch), s in summary.items():
        if not any(arch.startswith("standard") for (k, dd, arch) in summary if (k, dd) == (kind, d)):
            continue  # a census row with no standard run beside it
        named = "–" if s["named"].startswith("0 of 0") else s["named"]
        assert f"| {labels[kind]}, d = {d} | {arch} | {s['solved']} | {named} |" in page, (kind, d, arch)
    one = [s for (kind, d, arch), s in summary.items()
           if kind == "bidirectional" and arch == "standard, 1 head"]
    census = [s for (kind, d, arch), s in summary.items()
              if kind == "bidirectional" and arch.startswith("disentangled") and d in standard_ds]

    def count(text):  # "3 of 8 (…)" → 3
        return int(text.split(" of ")[0])

    def total(rows, name=None):
        return sum(count(r["solved"]) if name is None else r["names"].get(name, 0) for r in rows)

    scratch = [s for (kind, d, arch), s in summary.items()
               if kind == "scratch" and arch == "standard, 1 head"]
    scratch_census = [s for (kind, d, arch), s in summary.items()
                      if kind == "scratch" and arch.startswith("disentangled") and d in standard_ds]
    unnamed = {(n["model"], n["architecture"]): n for n in load("census_standard.json")["unnamed"]}
    none = unnamed["scratch", "standard, 1 head"]
    named = sum(count(s["named"]) + count(s["borderline"]) for s in scratch)
    sizes = [int(x) for s in scratch_census if s["its cells"] for x in s["its cells"].split("–")]
    ds = ", ".join(str(d) for d in sorted({s["d"] for s in one})[:-1]) + f" and {max(s['d'] for s in one)}"
    assert (f"over d = {ds} the rule names `two_block` in {total(one, 'two_block')} of {total(one)} "
            f"solved one-head bidirectional standard runs (the disentangled census: "
            f"{total(census, 'two_block')} of {total(census)}), `theorem2` in {total(one, 'theorem2')} of "
            f"{total(one)} ({total(census, 'theorem2')} of {total(census)}) and none in "
            f"{total(one, 'none')} of {total(one)} ({total(census, 'none')} of {total(census)}); "
            f"one-head causal scratch standard runs solved in {total(scratch)} of "
            f"{sum(s['trained'] for s in scratch)} and, under zero ablation, the rule names {named} of "
            f"the {total(scratch)}: none of the other {none['none']} has a faithful circuit among its "
            f"candidate cells, where {sum(count(s['minimal circuit faithful']) for s in scratch_census)} "
            f"of the {total(scratch_census)} solved disentangled scratch runs have one of {min(sizes)} "
            f"to {max(sizes)} cells; under mean ablation all {none['none']} are named, as a "
            "complement form or a tie that holds one") in text("README.md")
    assert none["no faithful circuit"] == none["none"] == total(scratch) - named
    # the same runs under the other ablation styles (the page's and the README's words)
    nones = [r for r in load("census_standard.json")["runs"] if r["architecture"] == "standard, 1 head"
             and r["kind"] == "scratch" and r["solved"] and r["mechanism"] == "none"]

    def forms(name):
        return [] if name in ("none", "borderline") else name.split(" = ")

    for style in ("mean", "resample"):
        names = [r[f"name_{style}"] for r in nones]
        assert all(any("complement" in f for f in forms(n)) for n in names if forms(n)), style
    mean = [r["name_mean"] for r in nones]
    resample = [r["name_resample"] for r in nones]
    assert all(forms(n) for n in mean)
    assert (f"Under mean ablation (the other cells replaced by their mean over the batch) all "
            f"{len(mean)} are named, and under resample ablation {sum(bool(forms(n)) for n in resample)} "
            f"({resample.count('none')} none, {resample.count('borderline')} borderline), as a "
            "complement form or a tie that holds one") in text("docs/standard.md")
    assert (f"complement forms only in {sum(all('complement' in f for f in forms(n)) for n in mean)} "
            f"of the {len(mean)} under mean ablation") in text("docs/standard.md")
    one_head, two_heads = (unnamed["bidirectional", f"standard, {h}"] for h in ("1 head", "2 heads"))
    both = [one_head, two_heads]
    inside = sum(n["inside a construction's cells"] for n in both)
    outside = [size for n in both for size in n["sizes outside"]]
    assert {c for n in both for c in n["constructions"]} == {"theorem2"}
    assert (f"Of the {one_head['none'] + two_heads['none']} solved bidirectional standard runs the "
            f"rule names none ({one_head['none']} with one head, {two_heads['none']} with two), "
            f"{sum(n['faithful minimal circuit'] for n in both)} have a faithful minimal circuit: in "
            f"{inside} its cells lie inside `theorem2`'s cells") in text("docs/standard.md")
    assert (f"and {len(outside)} are circuits of {min(outside)} to {max(outside)} cells outside the "
            f"registry. The other {sum(n['no faithful circuit'] for n in both)} have no faithful "
            "circuit among their candidate cells.") in text("docs/standard.md")
    bi_nones = [r for r in load("census_standard.json")["runs"] if r["architecture"].startswith("standard")
                and r["kind"] == "bidirectional" and r["solved"] and r["mechanism"] == "none"]
    assert (f"under mean and resample ablation {sum(r['name_mean'] == 'none' for r in bi_nones)} and "
            f"{sum(r['name_resample'] == 'none' for r in bi_nones)} of the {len(bi_nones)} stay "
            "none.") in text("docs/standard.md")


def test_the_standard_scratch_continuation_is_its_asset():
    """docs/standard.md's sentence on unsolved scratch runs trained on, from
    assets/standard_scratch_long.json (analyses/continue_unsolved.py)."""
    long = load("standard_scratch_long.json")
    runs = long["runs"]
    seeds = [str(r["seed"]) for r in runs]
    mses = [r["final_mse"] for r in runs]
    assert all(r["steps"] == long["steps"] for r in runs if r["solved_at"] is None)
    assert (f"the first {len(runs)} unsolved one-head runs at d = 10 (seeds {', '.join(seeds[:-1])} "
            f"and {seeds[-1]}), trained on from {long['first_steps']:,} to {long['steps']:,} steps in "
            f"copies of their own") in text("docs/standard.md")
    assert (f"solved in {long['solved']} of {len(runs)} and ended at MSE {min(mses):.2f} to "
            f"{max(mses):.2f}.") in text("docs/standard.md")
    assert (f"{long['solved']} of {len(runs)} unsolved runs at d = 10 solved by step "
            f"{long['steps']:,}.") in text("README.md")


def test_the_scratch_learning_rate_probe_is_its_record():
    """docs/standard.md's and the README's reading of assets/standard_scratch_lr.jsonl (the sweep record
    of analyses/grids/standard_scratch_lr.toml) beside the census's runs of the same seeds."""
    import json

    record = (REPO / "assets" / "standard_scratch_lr.jsonl").read_text()
    rows = [json.loads(line) for line in record.splitlines()]
    seeds = sorted(int(r["name"].rsplit("seed", 1)[1]) for r in rows)
    assert seeds == list(range(8)) and all(r["train"]["lr"] == 3e-3 for r in rows)
    assert all(r["model"]["arch"] == "standard" and r["model"]["n_heads"] == 1 for r in rows)
    steps = sorted(r["steps_to_solve"] for r in rows if r["steps_to_solve"] is not None)
    census = {r["seed"]: r for r in load("census_standard.json")["runs"]
              if r["kind"] == "scratch" and r["d"] == 10 and r["architecture"] == "standard, 1 head"}
    before = sum(census[s]["solved"] for s in seeds)
    page = text("docs/standard.md")
    assert (f"at lr 3e-3 instead of 1e-2, the same seeds 0 to 7 solved in {len(steps)} of 8 "
            f"({wilson(len(steps), 8)}), at steps {steps[0]:,} to {steps[-1]:,}, against {before} of the "
            f"same 8 at lr 1e-2") in page
    from invperm_interp.analysis.sweep_record import SweepRecord

    records = [SweepRecord.from_dict(r["analysis"]) for r in rows]
    minimal = [rec.mechanism.minimal for rec in records]
    named = {style: [n for rec in records if (n := str(rec.under[style])) not in ("none", "borderline")]
             for style in ("mean", "resample")}
    assert all(str(rec.answer) == "none" for rec in records) and not any(m.faithful for m in minimal)
    assert all("complement" in n for n in named["mean"])
    candidates = [m.candidates for m in minimal]
    assert (f"all {len(rows)} are none under zero ablation, with no faithful circuit among their "
            f"{min(candidates)} to {max(candidates)} candidate cells, and under mean ablation "
            f"{len(named['mean'])} of the {len(rows)} are named, each a complement form or a tie that "
            f"holds one (under resample ablation {len(named['resample'])})") in page
    assert (f"at lr 3e-3 instead of 1e-2 seeds 0–7 at d = 10 solved {len(steps)} of 8 "
            f"({wilson(len(steps), 8)}; at lr 1e-2 the same seeds solved {before} of 8;") in text("README.md")


def test_the_readmes_times_are_the_fresh_clone_record():
    """The README's set-up, test and demo times are assets/timings.json's (benchmarks/fresh_clone.py)."""
    steps = {t["step"]: t["wall_s"] for t in load("timings.json")["steps"]}

    def minutes(seconds: float) -> str:
        m, s = divmod(round(seconds), 60)
        return f"{m} min {s:02d} s"

    assert (f"the set-up took {minutes(steps['make setup'])} here (it downloads the packages: the "
            f"network sets its time), then `make test` {minutes(steps['make test'])} and `make demo` "
            f"{minutes(steps['make demo'])}") in text("README.md")


def test_the_final_layer_alone_on_bidirectional_runs_is_its_asset():
    """docs/standard.md's and the README's reading of the bidirectional runs of
    assets/minimal_under_mean.json: the final layer alone at the mean, by the rule's name."""
    runs = [r for r in load("minimal_under_mean.json")["runs"] if r["setting"] == "bidirectional"]
    standard = [r for r in runs if r["architecture"] == "standard"]
    census = [r for r in runs if r["architecture"] == "disentangled"]
    page = text("docs/standard.md")

    def alone(rows, style="mean"):
        return sum(r["final_layer_alone"][style]["faithful"] for r in rows)

    def named(name):  # placements pooled: "two_block @ L1h1→L2h0" is two_block
        return [r for r in standard if r["zero"]["name"].split(" @")[0] == name]

    unnamed = named("none") + named("borderline")
    assert (f"is faithful in {alone(standard)} of {len(standard)} standard runs (resampled "
            f"{alone(standard, 'resample')}, at zero {alone(standard, 'zero')}) and in {alone(census)} of "
            f"{len(census)} disentangled") in page
    two_block, appendix_b, theorem2 = named("two_block"), named("appendix_b"), named("theorem2")
    assert (f"it is faithful in {alone(two_block)} of {len(two_block)} standard `two_block` runs and "
            f"{alone(appendix_b)} of {len(appendix_b)} `appendix_b` runs") in page
    assert f"in {alone(theorem2)} of {len(theorem2)} `theorem2` runs" in page

    def rows(group):
        return [r["final_layer_alone"]["mean"]["rows_exact"] for r in group]

    assert (f"rows exact {min(rows(two_block)):.1%} to {max(rows(two_block)):.0%} in the `two_block` "
            f"runs, {min(rows(appendix_b)):.0%} in the `appendix_b` ones, {min(rows(theorem2)):.0%} to "
            f"{max(rows(theorem2)):.0%} in the `theorem2` ones") in page
    assert min(rows(appendix_b)) == max(rows(appendix_b))
    assert f"and in {alone(unnamed)} of the {len(unnamed)} named none or borderline" in page
    found = [r["mean"]["minimal"] for r in standard if r["mean"]["minimal"]["faithful"]]
    sizes = [m["size"] for m in found]
    rescued = sum(r["mean"]["minimal"]["faithful"] for r in unnamed)
    assert (f"circuit in {len(found)} of the {len(standard)} standard runs ({min(sizes)} to {max(sizes)} "
            f"cells, {sum(m['optimal'] for m in found)} proved smallest), {rescued} of the "
            f"{len(unnamed)} unnamed") in page
    single = sum(r["mean"]["minimal"]["faithful"] and r["mean"]["minimal"]["size"] == 1
                 and r["mean"]["minimal"]["cells"][0][0] == 1 for r in census)
    assert f"in {single} of the {len(census)} disentangled runs a single second-layer cell" in page
    scratch = [r for r in load("minimal_under_mean.json")["runs"] if r["setting"] == "causal scratch"
               and r["architecture"] == "standard" and r["heads"][0] == 1]
    assert (f"not that it does not depend on it (resampling the first layer instead keeps "
            f"{alone(standard, 'resample')} of the {len(standard)} bidirectional standard runs faithful "
            f"against {alone(standard)} at the mean, and {alone(scratch, 'resample')} of the {len(scratch)} "
            f"causal scratch ones against {alone(scratch)}), nor that the first layer does nothing (at "
            f"zero, {alone(standard, 'zero')} of {len(standard)} and {alone(scratch, 'zero')} of "
            f"{len(scratch)})") in page
    assert (f"the same test passes in {alone(two_block)} of {len(two_block)} `two_block` runs and "
            f"{alone(theorem2)} of {len(theorem2)} `theorem2` ones") in " ".join(text("README.md").split())


def test_the_standard_scratch_circuits_under_mean_ablation_are_their_asset():
    """docs/standard.md's reading of assets/minimal_under_mean.json (analyses/minimal_under_mean.py)."""
    runs = [r for r in load("minimal_under_mean.json")["runs"] if r["setting"] == "causal scratch"]
    page = text("docs/standard.md")
    one = [r for r in runs if r["architecture"] == "standard" and r["heads"][0] == 1]
    census = [r for r in runs if r["architecture"] == "disentangled"]
    minimal = [r["mean"]["minimal"] for r in one]
    single = [m["cells"][0] for m in minimal if m["size"] == 1]
    minus = sum(c == [1, 0, "pos.S", "L1.x", "-I"] for c in single)
    assert all(m["faithful"] and m["optimal"] for m in minimal)
    assert (f"In each of the {len(one)} solved one-head scratch runs it finds a faithful circuit that "
            f"the exact search proves smallest among the run's candidate cells: in {len(single)} a "
            "single cell, `L2 -I at (pos.S, L1.x)` "
            f"in {minus}") in page
    assert len(single) - minus == 1 and sum(m["size"] == 2 for m in minimal) == len(one) - len(single)
    alone = {style: [r["final_layer_alone"][style] for r in one] for style in ("mean", "resample", "zero")}
    rows = {style: [a["rows_exact"] for a in alone[style]] for style in alone}
    assert (f"is faithful in {sum(a['faithful'] for a in alone['mean'])} of {len(one)} (rows exact "
            f"{min(rows['mean']):.1%} to {max(rows['mean']):.0%}); resampled (each sample's first-layer "
            f"scores taken on another input), in {sum(a['faithful'] for a in alone['resample'])} of "
            f"{len(one)} (rows exact {min(rows['resample']):.1%} to {max(rows['resample']):.0%}); with "
            f"the first layer's scores at zero, in {sum(a['faithful'] for a in alone['zero'])} of "
            f"{len(one)} (rows exact {min(rows['zero']):.0%} to {max(rows['zero']):.0%})") in page
    sizes = [r["mean"]["minimal"]["size"] for r in census]
    first_layer = sum(any(c[0] == 0 for c in r["mean"]["minimal"]["cells"]) for r in census)
    assert (f"of {len(census)} (the first 4 solved at each d), the final layer alone at its mean is "
            f"faithful in {sum(r['final_layer_alone']['mean']['faithful'] for r in census)}, and their "
            f"minimal circuits under mean ablation have {min(sizes)} to {max(sizes)} cells, a "
            f"first-layer cell among them in {first_layer}.") in page
    below = sum(r < 0.99 for r in rows["resample"])
    assert below == len(one) - sum(a["faithful"] for a in alone["resample"])
    assert (f"(resampled, {below} of the {len(one)} fall below 99% rows exact, to "
            f"{min(rows['resample']):.1%} at worst)") in text("README.md")
    assert (f"resampled, {below} of the {len(one)} fall below the rule's 99% rows exact.") in page
    assert (f"the minimal-circuit search finds one second-layer cell in {len(single)} of the {len(one)} "
            f"(two in {len(one) - len(single)}); the final layer alone, with the first layer's scores at "
            f"their mean, is faithful in {sum(a['faithful'] for a in alone['mean'])} of {len(one)} "
            f"(`assets/minimal_under_mean.md`; resampled, {sum(a['faithful'] for a in alone['resample'])} "
            f"of {len(one)}; one batch each)") in text("README.md")
    assert f"one cell of the second layer ({len(single)} of {len(one)})" in page
    from invperm_interp.analysis.minimal import MAX_EXACT_CELLS

    two = [r for r in runs if r["architecture"] == "standard" and r["heads"][0] == 2]
    found = [r["mean"]["minimal"] for r in two]

    def lookup(cells, label="-I", heads=1):  # second-layer cells reading the first layer's x blocks
        return len({c[1] for c in cells}) <= heads and all(
            c[0] == 1 and c[2] == "pos.S" and c[3] in ("L1h0.x", "L1h1.x") and c[4] == label for c in cells)

    only = [lookup(m["cells"]) for m in found]
    with_first = [any(c[0] == 0 for c in m["cells"]) for m in found]
    at_6 = [w for w, r in zip(with_first, two) if r["d"] == 6]
    plus = [r for r, m in zip(two, found) if lookup(m["cells"], "I", heads=2)]
    assert all(m["faithful"] for m in found)
    assert [r["zero"]["name"].split(" @")[0] for r in plus] == ["theorem3_two_block_mass"]
    more = len(two) - sum(only) - sum(with_first) - len(plus)
    assert (f"With two heads per layer ({len(two)} solved runs) the circuit under mean ablation is the same "
            f"lookup on one second-layer head") in page
    assert (f"in {sum(only)} of the {len(two)}, with more second-layer cells in {more} and the `+I` cells in "
            f"the run named `theorem3_two_block_mass`; in {sum(with_first)} ({sum(at_6)} of the "
            f"{len(at_6)} at d = 6) a first-layer cell `-1 at (pos.Y, x)` joins") in page
    assert all(any(c[:4] == [0, c[1], "pos.Y", "x"] and c[4] == "-1" for c in m["cells"])
               for m, w in zip(found, with_first) if w)
    unproved = sorted(m["candidates"] for m in found if not m["optimal"])
    beyond = [c for c in unproved if c > MAX_EXACT_CELLS]
    (within,) = [c for c in unproved if c <= MAX_EXACT_CELLS]
    assert (f"Every one is faithful and {len(found) - len(unproved)} are proved smallest ({len(beyond)} of "
            f"the other {len(unproved)} have {min(beyond)} to {max(beyond)} candidate cells, past the exact "
            f"search's {MAX_EXACT_CELLS}; the ninth's {within} cells make more sets than its budget); the "
            "final layer alone at its mean is faithful in "
            f"{sum(r['final_layer_alone']['mean']['faithful'] for r in two)} of the {len(two)}") in page


def test_the_standard_census_progress_and_two_head_scratch_numbers_are_its_asset():
    """docs/standard.md's count of trained runs, its two-head scratch reading and W_OV's full rank,
    from assets/census_standard.json."""
    census = load("census_standard.json")
    page = text("docs/standard.md")
    standard = [r for r in census["runs"] if r["architecture"].startswith("standard")]
    trained = sum(r["finished"] for r in standard)
    if trained < len(standard):
        assert f"So far {trained} of its {len(standard)} runs have trained" in page
        assert f"The census's first {trained} runs beside" in text("README.md")
    else:
        assert f"All {trained} of its runs have trained" in page
        assert f"The census's {trained} runs beside" in text("README.md")
    rows = {(s["model"], s["d"], s["architecture"]): s for s in census["summary"]}
    two = {d: rows["scratch", d, "standard, 2 heads"] for d in (6, 8, 10, 12)}
    one = {d: rows["scratch", d, "standard, 1 head"] for d in (6, 8, 10, 12)}

    def solved(row, interval=False):  # "9 of 32 (16%–45%)" → "9 of 32", or as it stands
        return row["solved"] if interval else row["solved"].split(" (")[0]

    def count(text):
        return int(text.split(" of ")[0])

    n = sum(count(r["solved"]) for r in two.values())
    assert (f"Two-head causal scratch runs solved in {n} of {sum(r['trained'] for r in two.values())} "
            f"(d = 6: {solved(two[6])}, d = 8: {solved(two[8])}, d = 10: {solved(two[10])}, "
            f"d = 12: {solved(two[12])})") in page
    assert (f"Two-head against one-head scratch runs solved: {solved(two[6])} against {solved(one[6])} at "
            f"d = 6, {solved(two[8])} against {solved(one[8])} at d = 8, {solved(two[10], True)} against "
            f"{solved(one[10], True)} at d = 10, {solved(two[12])} against {solved(one[12])} at "
            "d = 12") in page
    runs = [r for r in census["runs"] if r["architecture"] == "standard, 2 heads" and r["kind"] == "scratch"
            and r["solved"]]
    nones = [r for r in runs if r["mechanism"] == "none"]
    named = [r for r in runs if r["mechanism"] != "none"]
    outside = [r["minimal_size"] for r in nones if r["minimal_faithful"]]
    renamed = [r for r in nones if r["name_mean"] not in ("none", "borderline")]
    assert all("complement" in r["name_mean"] for r in renamed)
    assert (f"under zero ablation the rule names {len(named)} of the {n} "
            f"(`{named[0]['mechanism'].split(' @')[0]}`, at d = {named[0]['d']}) and none the other "
            f"{len(nones)}, of which {len(nones) - len(outside)} have no faithful circuit among their "
            f"candidate cells (the other one of {outside[0]} cells outside the registry); under mean "
            f"ablation {len(renamed)} of the {len(nones)} are named") in page
    heads = [(rank == r["d_head"]) for r in standard if r.get("ov_numerical_rank")
             for layer in r["ov_numerical_rank"] for rank in layer]
    assert f"{sum(heads)} of the {len(heads)} trained heads' `W_OV` have full rank `d_head`" in page


def test_the_readme_controls_numbers_come_from_the_assets():
    """The README's negative controls: runs, empty claims rejected and random sets rejected per style
    (summed over the configurations), and the held-out named counts against the in-sample ones,
    recomputed from assets/controls.json."""
    from invperm_interp.analysis.controls import wilson

    readme = text("README.md")
    summary = load("controls.json")["summary"]

    def count(s, key):
        return tuple(int(x) for x in s[key].split(" (")[0].split(" of "))

    styles = sorted({s["style"] for s in summary})
    runs = sum(s["runs"] for s in summary if s["style"] == "zero")
    empty = {st: [count(s, "empty claim rejected") for s in summary if s["style"] == st] for st in styles}
    assert all(sum(k for k, _ in e) == sum(n for _, n in e) == runs for e in empty.values())
    random = [tuple(map(sum, zip(*[count(s, "random cell sets rejected") for s in summary
                                   if s["style"] == st]))) for st in styles]
    (draws,) = {n for _, n in random}
    ds = sorted({s["d"] for s in summary})
    assert (f"on {runs} held-out runs of every census configuration (d = {ds[0]} to {ds[-1]}, seeds no "
            f"construction was designed on) zero, mean and resample ablation and causal scrubbing each "
            f"reject the empty claim in {runs} of {runs} and random cell sets of the claim's size in "
            f"{min(k for k, _ in random):,} to {max(k for k, _ in random):,} of {draws:,} per style "
            f"(20 per run)") in readme
    zero = [s for s in summary if s["style"] == "zero"]
    held = [count(s, "named, held out") for s in zero]
    sizes = sorted({n for _, n in held})
    assert (f"held out, zero ablation names {min(k for k, _ in held)} to {max(k for k, _ in held)} of "
            f"the {' or '.join(map(str, sizes))} runs of each configuration, every interval "
            "overlapping the census's in-sample one") in readme
    for s, (k, n) in zip(zero, held):
        lo, hi = wilson(k, n)
        k2, n2 = count(s, "named, in sample (census)")
        lo2, hi2 = wilson(k2, n2)
        assert lo <= hi2 and lo2 <= hi, s


def test_the_census_page_says_how_many_tests_the_screen_settled():
    """docs/results/census.md's account of the rule's screen: how many recorded tests rest on the
    first SCREEN_SAMPLES samples of the 4,096, per style, from assets/census.json."""
    from invperm_interp.analysis.mechanism import SCREEN_SAMPLES

    runs = load("census.json")["runs"]
    counts = {key: [t["n"] for r in runs for t in r.get(key) or []]
              for key in ("tested", "tested_mean", "tested_resample")}
    assert {r["samples"] for r in runs} == {4096}
    assert all(set(n) == {SCREEN_SAMPLES, 4096} for n in counts.values())
    screened = {key: (n.count(SCREEN_SAMPLES), len(n)) for key, n in counts.items()}
    assert screened["tested_mean"] == screened["tested_resample"]
    (zero, zero_n), (mean, mean_n) = screened["tested"], screened["tested_mean"]
    assert (f"each construction is tested on the batch's first {SCREEN_SAMPLES} samples and measured "
            "again on all 4,096 only where an interval straddles a threshold there "
            f"(`mechanism.SCREEN_SAMPLES`), so {zero:,} of the census's {zero_n:,} zero-ablation tests "
            f"rest on {SCREEN_SAMPLES} samples ({mean:,} of {mean_n:,} under mean and under resample "
            "ablation)") in text("docs/results/census.md")


def test_the_census_pages_batches_and_thresholds_are_its_asset():
    """The census page's counts of names held on three batches and of names at each threshold."""
    data = load("census.json")
    solved = [r for r in data["runs"] if r["steps_to_target"] is not None]
    page = text("docs/results/census.md")

    def same(rows):
        return f"{sum(len(set(r['names_by_batch'])) == 1 for r in rows)} of {len(rows)}"

    bi = [r for r in solved if r["kind"] == "bidirectional"]
    sc = [r for r in solved if r["kind"] == "scratch"]
    moved = [r for r in sc if len(set(r["names_by_batch"])) > 1]
    border = sum("borderline" in r["names_by_batch"] for r in moved)
    assert border + census()["BATCH_TIES"] == len(moved)
    assert (f"{same(solved)} solved runs get the same name on all three fresh batches ({same(bi)} "
            f"bidirectional, {same(sc)} causal scratch)") in page
    assert f"and in {border} one batch is borderline." in page
    columns = [c for c in data["sensitivity"][0] if c.endswith("named / borderline / none")]
    named = {kind: [sum(int(s[c].split(" / ")[0]) for s in data["sensitivity"] if s["model"] == kind)
                    for c in columns] for kind in ("bidirectional", "scratch")}
    assert [c.split(":")[0] for c in columns] == ["95.0% rows / 70% loss", "99.0% rows / 80% loss",
                                                   "99.9% rows / 90% loss"]
    assert (f"the rule names {', '.join(map(str, named['bidirectional'][:2]))} and "
            f"{named['bidirectional'][2]} of the {len(bi)} solved bidirectional runs and "
            f"{', '.join(map(str, named['scratch'][:2]))} and {named['scratch'][2]} of the {len(sc)} "
            "causal-scratch ones") in page


def test_the_census_pages_tie_shares_are_its_asset():
    """The share of named scratch runs holding a tie under each style, with Wilson intervals."""
    rows = {(t["model"], t["style"]): t for t in load("census.json")["ties"]}
    page = text("docs/results/census.md")

    def counts(style):
        tied = rows["scratch", style]["tied (intervals overlap)"]
        k, n = (int(x) for x in tied.split(" (")[0].split(" of "))
        return k, n

    (mean, res, zero) = (counts(s) for s in ("mean", "resample", "zero"))
    assert f"{mean[0] / mean[1]:.0%}" == f"{res[0] / res[1]:.0%}" and wilson(*mean) == wilson(*res)
    assert mean[0] / mean[1] < 0.5 and res[0] / res[1] < 0.5
    assert (f"under mean and under resample ablation {mean[0] / mean[1]:.0%} of the named scratch runs "
            f"hold a tie (Wilson {wilson(*mean)} each), about half, against "
            f"{zero[0] / zero[1]:.0%} ({wilson(*zero)}) under zero ablation") in page


def test_the_census_pages_reading_of_the_discovery_cells_and_scrub_column():
    """The unnamed runs' layer-1 content-query cells, the superposed family under resampling, and why
    the discovery report's scrub column (measured before scrubbing changed) is not quoted."""
    data = load("discovery.json")
    page = text("docs/results/census.md")
    per_run = data["census"]["per_run"].values()
    guarded = sum(bool(v["layer1_content_query"]) for v in per_run)
    assert (f"superposed circuits, {guarded} of the {len(per_run)} with such a layer-1 content-query "
            "cell") in page
    none = [r for r in data["runs"] if r["before"]["zero"][0] == "none"]
    family = sum(bool(r["names"]["resample"][1]) and {r["names"]["resample"][1], *r["names"]["resample"][2]}
                 <= {"theorem3_superposed", "theorem3_superposed_guarded"} for r in none)
    alone = sum(r["names"]["resample"][1] == "theorem3_superposed_guarded" and not r["names"]["resample"][2]
                for r in none)
    assert (f"of the {len(none)} re-trained runs that the earlier registry left unnamed, the headline "
            f"test names {family} as the superposed family (Wilson {wilson(family, len(none))}), {alone} "
            f"of them by the form with the layer-1 content-mass guard alone ({wilson(alone, len(none))})"
            ) in page
    old = {"theorem3", "theorem3_complement"}
    named_old = sum(bool({r["names"]["scrub"][1], *r["names"]["scrub"][2]} & old) for r in data["runs"])
    scrubbed = load("scrubbing.json")
    assert not any(old & set(r["scrub_faithful"]) for r in scrubbed)  # today's scrubbing: in none
    assert (f"it names `theorem3` or `theorem3_complement` in {named_old} of the {len(data['runs'])} runs, "
            f"which today's scrubbing finds faithful in none of the {len(scrubbed)} runs") in page
    assert "| scrub |" not in page.split("The recount that found the guard")[1].split("By behaviour")[0]


def test_the_design_pages_guard_is_carried_by_every_discovery_run():
    """docs/design.md: each re-trained discovery run carries every guard atom with its sign."""
    runs = load("discovery.json")["runs"]
    assert all(len(r["guard_betas"]) == 3 and all(b > 0 for b in r["guard_betas"]) for r in runs)
    picked = sum(r["before"]["zero"][0] == "none" for r in runs)
    assert (f"what each of the {len(runs)} re-trained scratch runs of assets/discovery.md carries in "
            f"layer 1, every atom with its sign ({picked} of those runs were picked because the rule had "
            "left them unnamed") in text("docs/design.md")


def test_the_standard_pages_counts_in_place_of_mostly_are_its_asset():
    """docs/standard.md's counts where it once said 'mostly': one-head runs solved at d = 12, the
    unnamed runs whose circuit is theorem2's two lookups alone, and two-head runs named two_block."""
    census = load("census_standard.json")
    rows = {(s["model"], s["d"], s["architecture"]): s for s in census["summary"]}
    page = text("docs/standard.md")
    one, disentangled = rows["bidirectional", 12, "standard, 1 head"], rows["bidirectional", 12,
                                                                           "disentangled (census)"]
    k, n = (int(x) for x in one["solved"].split(" (")[0].split(" of "))
    assert (f"At d = 12 one-head standard runs solved in {k} of {n} in 3,000 steps (the other {n - k} sit "
            f"at MSE 3.0, d/4, predicting 1/2), where {disentangled['solved'].split(' (')[0]} disentangled "
            "census runs did.") in page
    inside = [r for r in census["runs"] if r["architecture"].startswith("standard") and r["kind"] ==
              "bidirectional" and r["solved"] and r["mechanism"] == "none" and r["minimal_faithful"]
              and any(w.split(" @")[0] == "theorem2" for w in r["minimal_within"])]
    third = [r for r in inside if any(c.startswith("L1") and c.endswith("at (pos.P, pos.Y)")
                                      for c in r["minimal_cells"])]
    assert (f"in {len(inside)} its cells lie inside `theorem2`'s cells (in {len(inside) - len(third)} of the "
            f"{len(inside)} its two lookups alone,") in page
    two = [r for r in census["runs"] if r["architecture"] == "standard, 2 heads" and r["kind"] ==
           "bidirectional" and r["solved"] and r["d"] in (8, 10, 12)]
    named = [r for r in two if r["mechanism"] not in ("none", "borderline")]
    blocks = sum(r["mechanism"].split(" @")[0] == "two_block" for r in named)
    assert (f"**At d = 8 to 12, two-head standard models, when named, learn `two_block` in {blocks} of "
            f"{len(named)}.** At d = 8, 10 and 12 the rule names {len(named)} of {len(two)} solved two-head "
            f"runs ({wilson(len(named), len(two))}), `two_block` in {blocks} of those {len(named)} "
            f"({wilson(blocks, len(named))})") in page


def test_the_standard_pages_scratch_heading_is_its_asset():
    census = load("census_standard.json")
    none = {(n["model"], n["architecture"]): n for n in census["unnamed"]}["scratch", "standard, 1 head"]
    solved = sum(int(s["solved"].split(" of ")[0]) for s in census["summary"]
                 if s["model"] == "scratch" and s["architecture"] == "standard, 1 head")
    assert (f"Of the one-head causal scratch standard models that solve, {none['no faithful circuit']} of "
            f"{solved} carry no circuit among their candidate cells that works alone under zero "
            "ablation.") in text("docs/standard.md")
