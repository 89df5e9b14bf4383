"""No script under analyses/ writes into the checkout's assets/ unless asked with --update-assets.
Each refuses a missing input, and an output in assets/, with exit status 2 before writing
anything; each writes next to its runs (or into --out) otherwise, and into assets/ when asked
(`make reproduce`, `make scrubbing`, ... pass --update-assets)."""

import json
import shutil
from dataclasses import replace

import pytest
from helpers import REPO, analysed, files_in, run_analyses_script

SCRIPTS = sorted(p.stem for p in (REPO / "analyses").glob("*.py") if p.stem != "common")
#: Each script that reads runs or a sweep, given a missing one (M) in place of it.
MISSING = {
    "census_report": ["{M}"],
    "census_shapes_report": ["{M}"],
    "census_standard_report": ["{M}"],
    "continue_unsolved": ["{M}", "{T}/copies", "--steps", "10"],
    "controls": ["{M}"],
    "discovery": ["{M}"],
    "discovery_census": ["{M}", "{M}"],
    "dynamics": ["{M}"],
    "dynamics_fine": ["{M}"],
    "minimal_under_mean": ["{M}", "--out", "{T}/minimal.json"],
    "scrubbing": ["{M}"],
    "standard": ["--floor", "{M}", "--long", "{M}", "--solve", "{M}"],
}
#: Each script told to write into assets/ (A) without --update-assets: through --out, its output
#: argument, or a sweep folder in assets/ for the census reports (which write beside it).
INTO_ASSETS = {
    "causal_floors": ["--out", "{A}/x"],
    "census_report": ["{A}/sweep"],
    "census_shapes_report": ["{A}/sweep"],
    "census_standard_report": ["{A}/sweep"],
    "constructions_table": ["--out", "{A}/x"],
    "continue_unsolved": ["{T}/sweep", "{A}/copies", "--steps", "10"],
    "controls": ["{M}", "--out", "{A}/x"],
    "discovery": ["{M}", "--out", "{A}/x"],
    "discovery_census": ["{M}", "{M}", "--out", "{A}/x"],
    "dynamics": ["{M}", "--out", "{A}/x"],
    "dynamics_fine": ["{M}", "--out", "{A}/x"],
    "learned_circuits": ["--runs", "{M}", "--out", "{A}/x"],
    "minimal_under_mean": ["{T}/sweep", "--out", "{A}/minimal.json"],
    "paper_recipe": ["--runs", "{M}", "--out", "{A}/x"],
    "patching": ["--runs", "{M}", "--out", "{A}/x"],
    "readings_table": ["--out", "{A}/x"],
    "scrubbing": ["{M}", "--out", "{A}/x"],
    "standard": ["--floor", "{M}", "--out", "{A}/x"],
}


def sweep(folder):
    """A sweep folder with one analysed run in its sweep.jsonl."""
    folder.mkdir(parents=True)
    record = {"name": "bidirectional_d6_seed0", "variant": "bidirectional_d6", "status": "stopped",
              "step": 700, "steps_to_solve": 700, "solve_mse": 1e-3,
              "final": {"step": 700, "mse": 9e-4, "row_acc": 1.0}, "mechanism": "two_block",
              "model": {"layout": {"d": 6}, "attention_dir": "bidirectional"}, "train": {"seed": 0},
              "analysis": analysed("two_block").to_dict()}
    (folder / "sweep.jsonl").write_text(json.dumps(record) + "\n")
    return folder


def test_every_script_is_checked():
    assert set(INTO_ASSETS) == set(SCRIPTS)
    assert set(MISSING) <= set(SCRIPTS)


@pytest.mark.parametrize("name", sorted(MISSING))
def test_a_missing_input_is_refused_before_anything_is_written(name, tmp_path, assets, script, capsys):
    missing = tmp_path / "missing"
    args = [a.format(M=missing, T=tmp_path) for a in MISSING[name]]
    assert run_analyses_script(script(name), *args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert str(missing) in err[-1]
    if name != "minimal_under_mean":  # argparse's usage line, then its error
        assert len(err) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["assets"]
    assert files_in(assets) == {}


@pytest.mark.parametrize("name", sorted(INTO_ASSETS))
def test_an_output_in_assets_is_refused_without_update_assets(name, tmp_path, assets, script, capsys):
    sweep(tmp_path / "sweep")
    sweep(assets / "sweep")
    before, made = files_in(assets), files_in(tmp_path)
    args = [a.format(A=assets, M=tmp_path / "missing", T=tmp_path) for a in INTO_ASSETS[name]]
    assert run_analyses_script(script(name), *args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "is in assets/" in err[-1]
    if name != "minimal_under_mean":
        assert len(err) == 1, err
    assert files_in(assets) == before
    assert files_in(tmp_path) == made


def test_out_and_update_assets_together_are_refused(tmp_path, assets, script, capsys):
    assert run_analyses_script(script("causal_floors"), "--out", tmp_path / "x", "--update-assets") == 2
    assert "--update-assets" in capsys.readouterr().err
    assert files_in(assets) == {} and not (tmp_path / "x").exists()


# -- each script writes beside its input, or into assets/ when asked -----------------------------------
def test_causal_floors(tmp_path, assets, script, monkeypatch):
    floors = script("causal_floors")
    monkeypatch.setattr(floors, "LAYOUTS", dict(list(floors.LAYOUTS.items())[:1]))
    monkeypatch.chdir(tmp_path)
    assert run_analyses_script(floors) == 0
    assert set(files_in(tmp_path / "runs" / "reproduce")) == {"causal_floors.json", "causal_floors.md"}
    assert files_in(assets) == {}
    assert run_analyses_script(floors, "--update-assets") == 0
    assert set(files_in(assets)) == {"causal_floors.json", "causal_floors.md"}


def test_constructions_table(tmp_path, assets, script, monkeypatch):
    table = script("constructions_table")
    registry = table.constructions.REGISTRY
    monkeypatch.setattr(table.constructions, "REGISTRY", {k: registry[k] for k in list(registry)[:1]})
    monkeypatch.setattr(table, "DS", (2,))
    monkeypatch.setattr(table, "BETAS", (10.0,))
    monkeypatch.chdir(tmp_path)
    (name,) = table.constructions.REGISTRY
    written = {"constructions.json", "constructions.md", f"constructions/{name}.png",
               f"constructions/{name}.svg"}
    assert run_analyses_script(table) == 0
    assert set(files_in(tmp_path / "runs" / "reproduce")) == written
    assert files_in(assets) == {}
    assert run_analyses_script(table, "--update-assets") == 0
    assert set(files_in(assets)) == written


def test_readings_table(tmp_path, assets, script, monkeypatch):
    table = script("readings_table")
    monkeypatch.chdir(tmp_path)
    written = {"readings.json", "readings.md"}
    assert run_analyses_script(table) == 0
    assert set(files_in(tmp_path / "runs" / "reproduce")) == written
    assert files_in(assets) == {}
    assert run_analyses_script(table, "--update-assets") == 0
    assert set(files_in(assets)) == written


def test_the_committed_readings_are_what_the_constructions_read(script):
    """assets/readings.json recomputes from the registry (a construction registered or changed
    since, or a change to the derivation, shows here)."""
    committed = json.loads((REPO / "assets" / "readings.json").read_text())
    assert script("readings_table").rows() == committed


def test_patching(tmp_path, assets, script, monkeypatch):
    patching = script("patching")
    models = patching.models
    monkeypatch.setattr(patching, "models", lambda runs: dict(list(models(runs).items())[:1]))
    (name,) = patching.models(tmp_path)
    written = {"patching.json", "patching.md", f"patching/{name}.png", f"patching/{name}.svg"}
    assert run_analyses_script(patching, "--runs", tmp_path / "runs", "--n", 4) == 0
    assert set(files_in(tmp_path / "runs")) == written
    assert files_in(assets) == {}
    assert run_analyses_script(patching, "--runs", tmp_path / "runs", "--n", 4, "--update-assets") == 0
    assert set(files_in(assets)) == written


@pytest.mark.slow
def test_learned_circuits(tmp_path, assets, script, monkeypatch):
    learned = script("learned_circuits")
    runs = learned.runs
    monkeypatch.setattr(learned, "runs", lambda seeds: {k: (cfg, 4, seed)
                                                        for k, (cfg, _, seed) in runs(seeds).items()})
    assert run_analyses_script(learned, "--seeds", 1, "--runs", tmp_path / "runs") == 0
    written = {"learned_circuits.json", "learned_circuits.md", "training_curves.png",
               "training_curves.svg"}
    assert written <= set(files_in(tmp_path / "runs"))
    assert (tmp_path / "runs" / "learned" / "causal_seed0.png").is_file()
    assert files_in(assets) == {}
    assert run_analyses_script(learned, "--seeds", 1, "--runs", tmp_path / "runs", "--out",
                               tmp_path / "out") == 0
    assert written <= set(files_in(tmp_path / "out"))
    assert files_in(assets) == {}


@pytest.mark.slow
def test_paper_recipe(tmp_path, assets, script):
    recipe = script("paper_recipe")
    steps = ["--paper-steps", 3, "--adam-steps", 3, "--runs", tmp_path / "runs"]
    written = {"paper_vs_adam.json", "paper_vs_adam.md", "paper_vs_adam.png", "paper_vs_adam.svg"}
    assert run_analyses_script(recipe, *steps) == 0
    assert written <= set(files_in(tmp_path / "runs"))
    assert files_in(assets) == {}
    assert run_analyses_script(recipe, *steps, "--update-assets") == 0
    assert set(files_in(assets)) == written


def test_discovery(tmp_path, assets, script, monkeypatch):
    """From the committed rows, each kept in its run's folder (so no model is loaded)."""
    committed = json.loads((REPO / "assets" / "discovery.json").read_text())
    shutil.copy(REPO / "assets" / "census.json", assets)  # read: the committed census
    for row in committed["runs"]:
        (tmp_path / "runs" / row["run"]).mkdir(parents=True)
        (tmp_path / "runs" / row["run"] / "mechanism.json").write_text("{}")
        (tmp_path / "runs" / row["run"] / "discovery.json").write_text(json.dumps(row))
    discovery = script("discovery")
    monkeypatch.setattr(discovery, "behaviour", lambda rows, runs: committed["behaviour"])
    before = files_in(assets)
    assert run_analyses_script(discovery, tmp_path / "runs") == 0
    written = json.loads((tmp_path / "runs" / "discovery.json").read_text())
    assert written["runs"] == committed["runs"]
    assert (tmp_path / "runs" / "discovery.md").is_file()
    assert files_in(assets) == before
    assert run_analyses_script(discovery, tmp_path / "runs", "--update-assets") == 0
    assert set(files_in(assets)) == {"census.json", "discovery.json", "discovery.md"}


def test_dynamics_from_json(tmp_path, assets, script, capsys):
    dynamics = script("dynamics")
    shutil.copy(REPO / "assets" / "dynamics.json", tmp_path)
    assert run_analyses_script(dynamics, tmp_path / "dynamics.json", "--from-json") == 0
    assert (tmp_path / "dynamics.md").read_text() == (REPO / "assets" / "dynamics.md").read_text()
    assert files_in(assets) == {}
    shutil.copy(REPO / "assets" / "dynamics.json", assets)
    before = files_in(assets)
    assert run_analyses_script(dynamics, assets / "dynamics.json", "--from-json") == 2
    assert "--update-assets" in capsys.readouterr().err
    assert files_in(assets) == before
    assert run_analyses_script(dynamics, assets / "dynamics.json", "--from-json", "--update-assets") == 0
    assert set(files_in(assets)) == {"dynamics.json", "dynamics.md"}


@pytest.mark.slow
def test_standard(tmp_path, assets, script):
    """One floor run of analyses/grids/standard.toml trained for 2 steps; the solve part the
    committed assets/standard.json's (its runs are not here)."""
    from invperm_interp.sweep.grid import load_grid
    from invperm_interp.training.single import train

    job = load_grid(REPO / "analyses" / "grids" / "standard.toml", allow_large=True).jobs[0]
    floor = tmp_path / "floor"
    train(job.model_cfg, replace(job.train_cfg, steps=2, eval_every=1, eval_size=64, batch_size=16,
                                 checkpoint_every=2, out_dir=str(floor / job.name)), progress=False)
    shutil.copy(REPO / "assets" / "standard.json", assets)
    before = files_in(assets)
    args = ["--floor", floor, "--long", tmp_path / "missing", "--solve", tmp_path / "missing"]
    assert run_analyses_script(script("standard"), *args) == 0
    assert {"standard.json", "standard.md", "standard.png"} <= set(files_in(floor))
    assert json.loads((floor / "standard.json").read_text())["floor_runs"][0]["run"] == job.name
    assert files_in(assets) == before
    assert run_analyses_script(script("standard"), *args, "--update-assets") == 0
    assert set(files_in(assets)) == {"standard.json", "standard.md", "standard.png"}


def test_controls(tmp_path, assets, script, monkeypatch):
    """A copy of the committed reference run as a one-run sweep, analysed on 256 samples under
    zero and mean ablation: its controls under every style, written beside it, then into assets."""
    from invperm_interp.analysis.controls import CONTROL_STYLES
    from invperm_interp.sweep.tasks import write_analysis

    name = "bidirectional_d6_seed1000"
    run = tmp_path / "runs" / name
    shutil.copytree(REPO / "tests" / "data" / "reference_runs" / "bidirectional_d6_seed0", run)
    (run / "analysis.json").unlink()
    write_analysis(run, samples=256, seed=1, mean_ablation=True)
    record = {"name": name, "variant": "bidirectional_d6", "status": "stopped", "step": 700,
              "steps_to_solve": 700, "solve_mse": 1e-3, "final": {"step": 700, "mse": 9e-4, "row_acc": 1.0},
              "mechanism": "two_block", "model": {"layout": {"d": 6}, "attention_dir": "bidirectional"},
              "train": {"seed": 1000}}
    (tmp_path / "runs" / "sweep.jsonl").write_text(json.dumps(record) + "\n")
    controls = script("controls")
    monkeypatch.setattr(controls, "SAMPLES", 256)
    monkeypatch.setattr(controls, "DRAWS", 5)
    assert run_analyses_script(controls, tmp_path / "runs") == 0
    written = json.loads((tmp_path / "runs" / "controls.json").read_text())
    (row,) = written["runs"]
    assert row["claim"] == "two_block" and [c["style"] for c in row["controls"]] == list(CONTROL_STYLES)
    assert all(c["testable"] and c["random_rejected"] == 5 for c in row["controls"])
    zero = next(s for s in written["summary"] if s["style"] == "zero" and s["runs"] == 1)
    assert zero["empty claim rejected"].startswith("1 of 1") and zero["named, held out"].startswith("1 of 1")
    assert files_in(assets) == {}
    assert run_analyses_script(controls, tmp_path / "runs", "--update-assets") == 0
    assert set(files_in(assets)) == {"controls.json", "controls.md"}
