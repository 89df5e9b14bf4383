"""analyses/census_report.py reads a census sweep's sweep.jsonl only and writes its report next to
the runs unless asked to update the checkout's assets/."""

import json

import pytest
from helpers import REPO, analysed, analyses_script, scored

ANALYSES = REPO / "analyses"


@pytest.fixture
def census_report(monkeypatch):
    return analyses_script(monkeypatch, "census_report")


def record(name, attention_dir, d, seed, mechanism, solved=True, **analysis):
    return {"name": name, "variant": name.rsplit("_", 1)[0], "status": "stopped", "step": 700,
            "steps_to_solve": 700 if solved else None, "solve_mse": 1e-3,
            "final": {"step": 700, "mse": 9e-4, "row_acc": 1.0}, "mechanism": mechanism,
            "model": {"layout": {"d": d}, "attention_dir": attention_dir},
            "train": {"seed": seed}, "analysis": analysed(mechanism, **analysis).to_dict()}


def test_the_report_is_written_next_to_the_runs_not_into_assets(tmp_path, census_report):
    rows = [record("bidirectional_d6_seed0", "bidirectional", 6, 0, "two_block"),
            record("bidirectional_d6_seed1", "bidirectional", 6, 1, "none"),
            record("scratch_d6_seed0", "causal", 6, 0, "theorem3_superposed", solved=False)]
    unfinished = dict(rows[0], name="bidirectional_d6_seed2", status="unfinished", mechanism=None,
                      analysis=None)
    (tmp_path / "sweep.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + [unfinished]))
    assets = {p: p.stat().st_mtime_ns for p in (ANALYSES.parent / "assets").glob("census.*")}
    assert census_report.main([str(tmp_path)]) == 0
    for ext in ("json", "md", "png", "svg"):
        assert (tmp_path / f"census.{ext}").stat().st_size > 100
    assert {p: p.stat().st_mtime_ns for p in (ANALYSES.parent / "assets").glob("census.*")} == assets
    summary = json.loads((tmp_path / "census.json").read_text())["summary"]
    bi = next(s for s in summary if s["model"] == "bidirectional")
    assert (bi["runs"], bi["planned"], bi["solved (MSE < 1e-3)"]) == (2, 3, 2)
    assert bi["mechanisms (of solved)"] == "two_block: 1, none: 1"
    scratch = next(s for s in summary if s["model"] == "scratch")
    assert scratch["solved (MSE < 1e-3)"] == 0


def test_a_folder_without_sweep_jsonl_is_one_line(tmp_path, census_report, capsys):
    assert census_report.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sweep.jsonl" in err[0]


def test_counts_carry_borderline_stability_both_ablation_styles_and_optimality(tmp_path, census_report):
    rows = [record("scratch_d6_seed0", "causal", 6, 0, "two_block"),
            record("scratch_d6_seed1", "causal", 6, 1, "borderline",
                   tests=[scored(rows=0.991, rows_se=0.002)], names=["borderline", "none", "none"]),
            record("scratch_d6_seed2", "causal", 6, 2, "none", tests=[scored(rows=0.5)],
                   mean="two_block", candidates=30, optimal=False, resample="theorem3")]
    (tmp_path / "sweep.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert census_report.main([str(tmp_path)]) == 0
    data = json.loads((tmp_path / "census.json").read_text())
    (s,) = data["summary"]
    assert s["borderline"] == 1
    assert s["named (95% CI)"].startswith("1 of 3 (")
    assert s["same name on 3 batches"].startswith("2 of 3 (")
    assert s["flips between two names (borderline aside)"] == 0  # borderline, none, none
    assert s["same name under mean ablation"] == "2 of 3"
    assert s["same name under resample ablation"] == "2 of 3"
    assert s["one name under all three ablation styles"].startswith("1 of 3 (")  # two_block
    assert s["'none' under every style"].startswith("0 of 3 (")
    kept = {r["name by the rule"]: (r["runs"], r["same under mean ablation"],
                                    r["same under resample ablation"], r["same under both"])
            for r in data["by_style"]}
    assert kept == {"two_block": (1, 1, 1, 1), "borderline": (1, 1, 1, 1), "none": (1, 0, 0, 0)}
    report = (tmp_path / "census.md").read_text()
    disagree = report.split("## Where the ablation styles disagree")[1].split("##")[0]
    assert "| scratch | none | two_block | theorem3 | 1 |" in disagree
    assert s["minimal circuit optimal (runs with <= 24 candidate cells)"] == "2 of 2"
    assert [r["seed"] for r in data["runs"]] == [0, 1, 2]  # the run's seed, not the analysis's
    (line,) = data["sensitivity"]
    values = [v for k, v in line.items() if "named / borderline / none" in k]
    # 0.991 ± 0.004 straddles 0.99 (borderline) but clears 0.95, and falls below 0.999
    assert values == ["2 / 0 / 1", "1 / 1 / 1", "1 / 0 / 2"]


def test_name_at_is_the_librarys_rule_on_recorded_scores(census_report):
    row = census_report.run_columns(analysed("b", tests=[
        scored("a", recovered=0.85), scored("b", recovered=0.95), scored("c", rows=0.97, rows_se=0.001)]))
    assert census_report.name_at(row, 0.99, 0.8) == "b"  # the most loss recovered wins
    assert census_report.name_at(row, 0.99, 0.9) == "b"
    assert census_report.name_at(row, 0.99, 0.96) == "borderline"  # 0.95 ± 0.02 straddles 0.96
    assert census_report.name_at(row, 0.99, 0.99) == "none"
    assert census_report.name_at(row, 0.95, 0.99) == "none"


def test_wilson_interval_matches_its_closed_form(census_report):
    lo, hi = census_report.wilson(8, 10)
    # the Wilson score interval for 8/10 at z = 1.96 (Newcombe 1998, Table I: 0.490-0.943)
    assert (round(lo, 3), round(hi, 3)) == (0.490, 0.943)
    assert census_report.wilson(0, 5)[0] == 0.0 and census_report.wilson(5, 5)[1] == 1.0


def test_the_census_page_quotes_the_committed_census(census_report):
    """The census page's table is the one census_report makes from assets/census.json."""
    summary = json.loads((REPO / "assets" / "census.json").read_text())["summary"]
    page = (REPO / "docs" / "results" / "census.md").read_text()
    assert census_report.readme_table(summary) in page


def test_agreement_groups_runs_by_their_three_names(census_report):
    def run(zero, mean, resample):
        return {"mechanism": zero, "name_mean_ablation": mean, "name_resample_ablation": resample}

    groups = list(census_report.AGREEMENT)
    assert census_report.agreement(run("two_block", "two_block", "two_block")) == groups[0]
    assert census_report.agreement(run("theorem3_two_block_mass", "theorem3_two_block",
                                       "theorem3_two_block_mass")) == groups[1]
    assert census_report.agreement(run("theorem3_superposed", "theorem3_superposed", "none")) \
        == groups[2]
    assert census_report.agreement(run("none", "borderline", "none")) == groups[3]
    assert census_report.agreement(run("none", "none", "none")) == groups[3]


def test_the_committed_census_md_is_what_census_json_makes(tmp_path, census_report):
    """assets/census.md (its wording included) is regenerated from assets/census.json alone."""
    rows, planned = census_report.rows_from_json(REPO / "assets" / "census.json")
    census_report.write_census(rows, planned, tmp_path)
    assert (tmp_path / "census.md").read_text() == (REPO / "assets" / "census.md").read_text()


def test_ties_and_completeness_are_recounted_under_every_style_the_sweep_kept_tests_for(
        tmp_path, census_report):
    apart = [scored("theorem3_superposed", recovered=0.97, recovered_se=1e-3),
             scored("theorem3", recovered=0.90, recovered_se=1e-3)]
    close = [scored("theorem3_superposed", recovered=0.97, recovered_se=1e-3),
             scored("theorem3_superposed_guarded", recovered=0.969, recovered_se=1e-3)]
    run = analysed("theorem3_superposed", tests=apart).with_names(
        {"resample": ("faithful", "theorem3_superposed", ("theorem3_superposed_guarded",))},
        {"resample": tuple(close)})
    line = record("scratch_d6_seed0", "causal", 6, 0, "theorem3_superposed")
    line["analysis"] = run.to_dict()
    (tmp_path / "sweep.jsonl").write_text(json.dumps(line) + "\n")
    assert census_report.main([str(tmp_path)]) == 0
    data = json.loads((tmp_path / "census.json").read_text())
    ties = {t["style"]: t for t in data["ties"]}
    assert ties["zero"]["tied (intervals overlap)"].startswith("0 of 1")
    assert ties["mean"]["tied (intervals overlap)"].startswith("0 of 1")
    assert ties["resample"]["tied (intervals overlap)"].startswith("1 of 1")
    assert ties["resample"]["ties"] == "theorem3_superposed = theorem3_superposed_guarded"
    (s,) = data["summary"]
    # scored()'s model less the circuit recovers 0.0 of the loss under mean and resample ablation;
    # zero ablation's is recounted from the recorded MSEs
    zero = census_report.without_recovered(data["runs"][0])
    assert s["named circuit removed: median loss recovered (zero / mean / resample ablation)"] == (
        f"{zero:.3f} / 0.000 / 0.000")
    assert data["runs"][0]["without_resample"] == 0.0
    assert [t["name"] for t in data["runs"][0]["tested_resample"]] == [t.hypothesis for t in close]


def test_a_tie_is_counted_as_its_set_whichever_name_the_batch_put_first(census_report):
    from invperm_interp.analysis.verdict import Answer

    record = analysed("theorem3_superposed").with_names({
        "mean": Answer("faithful", "theorem3_superposed_guarded", ("theorem3_superposed",)),
        "resample": Answer("faithful", "theorem3_superposed", ("theorem3_superposed_guarded",))})
    row = census_report.run_columns(record)
    assert row["name_mean_ablation"] == row["name_resample_ablation"] == (
        "theorem3_superposed = theorem3_superposed_guarded")


def test_names_share_a_construction_alone_or_in_a_tie(census_report):
    assert census_report.shares("a", "a = b") and census_report.shares("a = b", "b")
    assert not census_report.shares("a", "b") and not census_report.shares("none", "none")


def test_a_flip_is_two_batches_naming_disjoint_constructions(census_report):
    assert not census_report.flips(["a", "a = b", "a"])  # a tie on one batch holds the name
    assert not census_report.flips(["a", "borderline", "a"])
    assert census_report.flips(["a", "b = c", "a"]) and census_report.flips(["a", "none", "a"])


def test_the_recount_without_the_guarded_forms_leaves_them_out_of_the_same_tests(census_report):
    tests = [scored("theorem3_superposed_guarded", recovered=0.97, recovered_se=1e-3),
             scored("theorem3_superposed", rows=0.5)]
    rows = [dict(census_report.run_columns(analysed("theorem3_superposed_guarded", tests=tests)),
                 kind="scratch", steps_to_target=700),
            dict(census_report.run_columns(analysed("two_block")), kind="scratch", steps_to_target=700)]
    by_style = {r["style"]: r for r in census_report.guarded_recount(rows)}
    for style in ("zero", "mean", "resample"):
        line = by_style[style]
        assert line["with the guarded forms: named / borderline / none"] == "2 / 0 / 0"
        assert line["without them: named / borderline / none"] == "1 / 0 / 1"
        assert line["a guarded form alone"] == 1


def test_from_json_writes_beside_the_json_and_refuses_the_committed_one(tmp_path, census_report,
                                                                       capsys):
    committed = REPO / "assets" / "census.json"
    (tmp_path / "census.json").write_text(committed.read_text())
    assert census_report.main([str(tmp_path / "census.json"), "--from-json"]) == 0
    assert (tmp_path / "census.md").read_text() == (REPO / "assets" / "census.md").read_text()
    assets = {p: p.stat().st_mtime_ns for p in (REPO / "assets").glob("census.*")}
    capsys.readouterr()
    assert census_report.main([str(committed), "--from-json"]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert "is in assets/" in err and "--update-assets" in err
    assert {p: p.stat().st_mtime_ns for p in (REPO / "assets").glob("census.*")} == assets
