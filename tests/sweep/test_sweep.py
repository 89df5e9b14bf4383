"""invperm sweep: grid expansion and its errors, the local and (debug-executor) slurm paths, a
sweep killed mid-way and rerun, and the report."""

import html
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, analysed, fake_mechanism, scored, tiny_grid_text

from invperm_interp.cli import main
from invperm_interp.sweep.engine import run_sweep, units
from invperm_interp.sweep.grid import load_grid
from invperm_interp.sweep.workers import executor_parameters

SRC = REPO / "src"

SLURM_TABLE = '[slurm]\npartition = "gpu"\ntime = 30\ngpus = 1\ncpus_per_task = 2\n'


def tiny(steps=20, every=10, head=""):
    """Four runs (d = 2, 3; seeds 0, 1) with a [slurm] table."""
    return tiny_grid_text(seeds="{start = 0, stop = 2}", d="[2, 3]", steps=steps, every=every,
                          head=head, tail=SLURM_TABLE)


def grid_file(tmp_path, text=None, steps=20, every=10, name="grid.toml"):
    path = tmp_path / name
    path.write_text(text if text is not None else tiny(steps, every))
    return path


def lines(path):
    return [json.loads(x) for x in Path(path).read_text().splitlines()]


def test_grid_expands_axes_seeds_and_variants(tmp_path):
    grid = load_grid(grid_file(tmp_path))
    assert [j.name for j in grid.jobs] == ["d2_seed0", "d2_seed1", "d3_seed0", "d3_seed1"]
    assert [(j.model_cfg.d, j.train_cfg.seed) for j in grid.jobs] == [(2, 0), (2, 1), (3, 0), (3, 1)]
    text = """seeds = 1
[train]
steps = [5, 7]
[[variants]]
name = "bi"
model = { attention_dir = "bidirectional" }
[[variants]]
name = "scr"
model = { layout = "scratch", d = 3, attention_dir = "causal", readout = "S", n_heads = [[2, 1]] }
"""
    grid = load_grid(grid_file(tmp_path, text))
    assert [j.name for j in grid.jobs] == ["bi_steps5_seed0", "bi_steps7_seed0", "scr_steps5_seed0",
                                           "scr_steps7_seed0"]
    scr = grid.jobs[2].model_cfg
    assert (scr.layout.names, scr.heads, scr.readout) == (("P", "Y", "S"), (2, 1), "S")


@pytest.mark.parametrize("text, key", [
    ("[model]\nwidth = 3", "model.width: unknown field"),
    ("[train]\nsteps = []", "train.steps: is an empty axis"),
    ("[train]\nsteps = [10, 0]", "train.steps = 0: steps must be"),
    ("[model]\nreadout = 'S'", "model.readout = 'S': readout must name"),
    ("[model]\nlayout = 'ring'", "model.layout = 'ring'"),
    ("seeds = 0", "seeds: must be"),
    ("sedes = 2", "sedes: unknown key"),
    ("[train]\nseed = 3", "train.seed: give seeds at the top level"),
    ("[slurm]\ngpu = 1", "slurm.gpu: unknown key"),
    ("[[variants]]\nname = 'a'\nmodel = {d = 3}\n[[variants]]\nname = 'a'\nmodel = {d = 3}",
     "two jobs are both named"),
    ("[[variants]]\nname = 'a'\n[[variants]]\nname = 'b'", "the grid is empty"),
    ("[train\nsteps = 1", "is not TOML"),
])
def test_a_malformed_grid_is_one_error_naming_the_key_before_any_job(tmp_path, text, key, capsys):
    path = grid_file(tmp_path, text)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="grid .*" + key.replace("[", r"\[").replace("(", r"\(")):
        run_sweep(path, out, executor="debug", progress=False)
    assert not out.exists()  # nothing started
    assert main(["sweep", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("invperm sweep: error: grid ")


def test_slurm_parameters_come_from_the_grid(tmp_path):
    grid = load_grid(grid_file(tmp_path))
    params = executor_parameters("slurm", grid.slurm)
    params = executor_parameters("slurm", grid.slurm, grid.name)  # jobs named after the grid
    assert params == {"timeout_min": 30, "name": f"invperm-{grid.name}", "gpus_per_node": 1,
                      "cpus_per_task": 2, "slurm_partition": "gpu"}


def test_slurm_path_with_the_debug_executor_then_nothing_left(tmp_path):
    path = grid_file(tmp_path)
    out = tmp_path / "out"
    sweep = run_sweep(path, out, executor="debug", progress=False)
    rows = lines(sweep)
    assert [r["name"] for r in rows] == ["d2_seed0", "d2_seed1", "d3_seed0", "d3_seed1"]
    assert all(r["status"] == "finished" and r["step"] == 20 for r in rows)
    for r in rows:
        metrics = [json.loads(x) for x in (out / r["name"] / "metrics.jsonl").read_text().splitlines()]
        solved = next((m["step"] for m in metrics if m["mse"] < 1e-3), None)
        assert r["steps_to_solve"] == solved and r["final"]["mse"] == metrics[-1]["mse"]
        assert r["train"]["seed"] == int(r["name"][-1]) and r["model"]["layout"]["d"] == int(r["name"][1])
    assert units(load_grid(path), out) == []  # a rerun has nothing to train
    before = {p: p.stat().st_mtime_ns for p in out.rglob("final.safetensors")}
    assert run_sweep(path, out, executor="debug", progress=False).read_text() == sweep.read_text()
    assert {p: p.stat().st_mtime_ns for p in out.rglob("final.safetensors")} == before
    assert main(["sweep-report", str(out)]) == 0
    report = (out / "sweep_report.md").read_text()
    assert "d2_seed0" in report and (out / "sweep_report.png").stat().st_size > 1000


def test_collect_writes_what_the_sweep_would_and_trains_nothing(tmp_path, capsys):
    """--collect: every run of the grid from the folders as they are; a grid trained in parts
    (here a grid of two of its runs) collects to the line the whole grid's sweep writes."""
    path, out = grid_file(tmp_path), tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--collect"]) == 2  # a usage error
    assert "--out must be the grid's sweep folder" in capsys.readouterr().err
    part = grid_file(tmp_path, tiny_grid_text(seeds='{"d=2" = 2, "d=3" = [1]}', d="[2, 3]",
                                              steps=20, every=10, tail=SLURM_TABLE), name="part.toml")
    assert [r["name"] for r in lines(run_sweep(part, out, executor="debug", progress=False))] == [
        "d2_seed0", "d2_seed1", "d3_seed1"]
    assert main(["sweep", str(path), "--out", str(out), "--collect"]) == 0
    assert "(3 finished, 1 unfinished); trained nothing" in capsys.readouterr().out
    collected = lines(out / "sweep.jsonl")
    assert [(r["name"], r["status"], r["step"]) for r in collected] == [
        ("d2_seed0", "finished", 20), ("d2_seed1", "finished", 20), ("d3_seed0", "unfinished", 0),
        ("d3_seed1", "finished", 20)]
    assert not (out / "d3_seed0").exists()
    whole = lines(run_sweep(path, out, executor="debug", progress=False))
    assert [whole[i] for i in (0, 1, 3)] == [collected[i] for i in (0, 1, 3)]


def test_local_sweep_killed_mid_way_and_rerun_ends_the_same(tmp_path):
    path = grid_file(tmp_path, steps=300, every=20)
    reference = run_sweep(path, tmp_path / "ref", executor="debug", progress=False)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "invperm_interp.cli", "sweep", str(path), "--out", str(out),
           "--workers", "1", "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:  # kill the whole sweep (driver and worker) once one run is done and another has started
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            finals = list(out.glob("*/final.safetensors"))
            started = [p for p in out.glob("*/checkpoints/*.safetensors") if
                       not (p.parent.parent / "final.safetensors").exists()]
            if finals and started or proc.poll() is not None:
                break
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finished = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("*/final.safetensors")}
    assert 1 <= len(finished) < 4, "the sweep should have been killed mid-way"
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert (out / "sweep.jsonl").read_text() == reference.read_text()
    for name, mtime in finished.items():  # finished runs were skipped, not retrained
        assert (out / name / "final.safetensors").stat().st_mtime_ns == mtime


@pytest.mark.slow
def test_a_run_whose_local_worker_is_killed_says_so(tmp_path, capsys):
    """kill -9 of a worker (as the kernel's OOM killer does): its run is reported with the signal,
    the worker and its log, not only as "did not finish"; a rerun completes it."""
    import threading

    from invperm_interp.sweep.engine import SweepIncomplete

    path = grid_file(tmp_path, tiny_grid_text(seeds="1", steps=400, every=20))
    out = tmp_path / "out"
    killed = []

    def kill_the_worker_once_it_trains():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not killed:
            claims = [p for p in (out / ".sweep" / "claims").glob("*") if p.read_text().strip()]
            if claims and list(out.glob("*/checkpoints/*.safetensors")):
                killed.append(int(claims[0].read_text()))
                os.kill(killed[0], signal.SIGKILL)
            time.sleep(0.05)

    thread = threading.Thread(target=kill_the_worker_once_it_trains, daemon=True)
    thread.start()
    with pytest.raises(SweepIncomplete, match="0 of 1 runs finished"):
        run_sweep(path, out, workers=1, progress=False)
    thread.join()
    err = capsys.readouterr().err
    assert killed and (f"  seed0: its worker 0 (pid {killed[0]}) was killed by SIGKILL; see "
                       f"{out / '.sweep' / 'logs' / 'worker-0.log'}") in err, err
    assert run_sweep(path, out, workers=1, progress=False) == out / "sweep.jsonl"


def test_the_mechanism_hook_fills_the_sweep_line(tmp_path, monkeypatch):
    import importlib

    from invperm_interp.analysis.sweep_record import SweepRecord

    mech_mod = importlib.import_module("invperm_interp.analysis.mechanism")
    seen = fake_mechanism(monkeypatch, "appendix_b")
    text = tiny(steps=10, head="mechanism = true")
    out = tmp_path / "out"
    rows = lines(run_sweep(grid_file(tmp_path, text), out, executor="debug", progress=False))
    assert [r["mechanism"] for r in rows] == ["appendix_b"] * 4
    assert sorted(seen) == [(2, 4096), (2, 4096), (3, 4096), (3, 4096)]  # a verdict's samples
    assert json.loads((out / "d2_seed0" / "mechanism.json").read_text())["name"] == "appendix_b"
    run_sweep(grid_file(tmp_path, text), out, executor="debug", progress=False)
    assert len(seen) == 4  # cached: a rerun does not analyse again

    # Asking for a second ablation style adds its name and the tests behind it to each record,
    # analysing nothing else.
    styles = []

    def fake_tests_on(model, batch, *, ablation="zero", reference=None, **kwargs):
        styles.append((ablation, len(batch), len(reference)))
        empty = scored("the empty claim", rows=0.1, recovered=0.05)  # rejected: a test that can
        return [scored("theorem2", recovered=0.99), scored("two_block", recovered=0.5)], empty

    monkeypatch.setattr(mech_mod, "tests_on", fake_tests_on)
    more = text.replace("mechanism = true", "mechanism = {resample_ablation = true}")
    rows = lines(run_sweep(grid_file(tmp_path, more), out, executor="debug", progress=False))
    assert len(seen) == 4 and styles == [("resample", 4096, 4096)] * 4
    record = json.loads((out / "d2_seed0" / "mechanism.json").read_text())
    assert record["name"] == "appendix_b" and record["under"] == {"resample": ["faithful", "theorem2", []]}
    again = SweepRecord.read(out / "d2_seed0" / "mechanism.json")
    assert [t.hypothesis for t in again.tested_under["resample"]] == ["theorem2", "two_block"]
    assert again.named_test("resample").circuit.loss_recovered == 0.99
    assert again.empty("resample").circuit.loss_recovered == 0.05  # the control is kept
    run_sweep(grid_file(tmp_path, more), out, executor="debug", progress=False)
    assert len(styles) == 4  # now complete: nothing left to do
    # Other samples redo the whole analysis.
    fewer = text.replace("mechanism = true", "mechanism = {samples = 64}")
    run_sweep(grid_file(tmp_path, fewer), out, executor="debug", progress=False)
    assert len(seen) == 8 and seen[-1][1] == 64


def test_a_run_trained_on_after_its_analysis_is_analysed_again(tmp_path, monkeypatch):
    """The record names the weights it read (their digest): once the run is extended with
    ``--resume --steps``, sweep.jsonl drops the stale mechanism and a rerun analyses it again."""
    from invperm_interp.analysis.sweep_record import SweepRecord
    from invperm_interp.runs.checkpoint import weights_digest
    from invperm_interp.sweep.collect import collect

    seen = fake_mechanism(monkeypatch, "appendix_b")
    path, out = grid_file(tmp_path, tiny(steps=10, head="mechanism = true")), tmp_path / "out"
    run_sweep(path, out, executor="debug", progress=False)
    run = out / "d2_seed0"
    before = weights_digest(run / "final.safetensors")
    assert len(seen) == 4 and SweepRecord.read(run / "mechanism.json").weights == before
    assert main(["train", "--resume", str(run), "--steps", "20", "--no-progress"]) == 0
    after = weights_digest(run / "final.safetensors")
    assert after not in (None, before)
    grid = load_grid(path)
    assert [grid.jobs[i].name for u in units(grid, out) for i in u] == ["d2_seed0"]
    rows = {r["name"]: r for r in lines(collect(grid, out))}
    assert rows["d2_seed0"]["mechanism"] is None and rows["d2_seed0"]["step"] == 20
    assert rows["d2_seed1"]["mechanism"] == "appendix_b"
    rows = {r["name"]: r for r in lines(run_sweep(path, out, executor="debug", progress=False))}
    assert sorted(d for d, _ in seen[:4]) == [2, 2, 3, 3] and seen[4][0] == 2  # only it again
    assert rows["d2_seed0"]["mechanism"] == "appendix_b"
    assert SweepRecord.read(run / "mechanism.json").weights == after


def test_a_run_whose_mechanism_the_analysis_refuses_is_finished_with_the_reason(
        tmp_path, monkeypatch, capsys):
    """A LayerNorm run trains; only its mechanism is refused (its map to the disentangled model
    is not exact): its sweep line says why, the sweep ends rc 0 and a rerun has nothing to do."""
    seen = fake_mechanism(monkeypatch, "appendix_b")
    text = tiny_grid_text(name="ln", seeds="1", d="3", steps=4, every=2, eval_every=2,
                          head="mechanism = {samples = 64}")
    text = text.replace("[model]\n", '[model]\narch = "standard"\nd_model = 8\n'
                                      "layernorm = [false, true]\n")
    path, out = grid_file(tmp_path, text), tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--executor", "debug"]) == 0
    assert "layernormTrue_seed0: mechanism analysis refused: the map to the disentangled model is " \
           "exact only without LayerNorm" in capsys.readouterr().out
    rows = {r["name"]: r for r in lines(out / "sweep.jsonl")}
    assert rows["layernormFalse_seed0"]["mechanism"] == "appendix_b"
    assert "mechanism_refused" not in rows["layernormFalse_seed0"]
    refused = rows["layernormTrue_seed0"]
    assert refused["status"] == "finished" and refused["mechanism"] is None
    assert refused["mechanism_refused"].startswith("the map to the disentangled model is exact only "
                                                   "without LayerNorm")
    assert not (out / ".sweep" / "failed").exists() and len(seen) == 1
    assert units(load_grid(path), out) == []  # nothing left to train or analyse


def _record(**change):
    from invperm_interp import Layout, ModelConfig
    from invperm_interp.config import TrainConfig

    record = {"name": "d2_seed0", "status": "finished", "step": 20, "steps_to_solve": 10,
              "solve_mse": 1e-3, "final": {"step": 20, "mse": 1e-4, "row_acc": 1.0},
              "mechanism": "two_block", "model": ModelConfig(Layout.plain(2)).to_dict(),
              "train": TrainConfig(steps=20, device="cpu").to_dict()}
    record.update(change)
    return {k: v for k, v in record.items() if v != "DROP"}


@pytest.mark.parametrize("text, where", [
    ("{}\n", "line 1"),
    (json.dumps(_record(status="DROP")) + "\n", "line 1"),  # a missing key
    (json.dumps(_record()) + "\n" + json.dumps(_record(model=5)) + "\n", "line 2"),
    (json.dumps(_record(model={"layout": 3})) + "\n", "line 1"),
    (json.dumps(_record(model={"layout": {"d": "2"}})) + "\n", "line 1"),
    (json.dumps(_record(steps_to_solve="10")) + "\n", "line 1"),
    (json.dumps(_record(final=[1, 2])) + "\n", "line 1"),
    (json.dumps(_record(solve_mse="small")) + "\n", "line 1"),
    (json.dumps(_record(train=None)) + "\n", "line 1"),
    ("\n" + json.dumps(_record()) + "\n[1, 2]\n", "line 3"),  # not an object
    ("null\n", "line 1"),
    ("{not json\n", "line 1"),
    ("", "lists no runs"),  # an empty file
    (json.dumps(_record()) + "\n" + json.dumps(_record()) + "\n", "line 2 repeats run d2_seed0 (line 1)"),
])
def test_a_malformed_sweep_jsonl_is_one_line_naming_file_and_line(tmp_path, capsys, text, where):
    (tmp_path / "sweep.jsonl").write_text(text)
    assert main(["sweep-report", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("invperm sweep-report: error: ") and where in line, line
    assert str(tmp_path / "sweep.jsonl") in line, line
    assert not (tmp_path / "sweep_report.md").exists()


def test_a_sweep_line_reads_as_a_typed_row_and_writes_back_its_bytes(tmp_path):
    """``SweepRow``: a line as the sweep writes it reads back to the same bytes; an older line
    without ``variant`` or ``analysis`` still reads; ``read_sweep`` keeps the dict view."""
    from invperm_interp import Layout, ModelConfig
    from invperm_interp.runs.evaluation import Evaluation
    from invperm_interp.sweep.collect import SweepRow, read_rows, read_sweep

    final = Evaluation(step=20, mse=1e-4, row_acc=1.0)
    rows = [SweepRow("d2_seed0", "finished", 20, 10, 1e-3, final, "two_block",
                     ModelConfig(Layout.plain(2)).to_dict(), {"seed": 0}, variant="v",
                     analysis={"any": 1}),
            SweepRow("d3_seed0", "finished", 20, None, 1e-3, None, None,
                     ModelConfig(Layout.plain(3)).to_dict(), {"seed": 0}, mechanism_refused="why")]
    text = "".join(json.dumps(r.to_dict()) + "\n" for r in rows)
    (tmp_path / "sweep.jsonl").write_text(text)
    read = [row for _, row in read_rows(tmp_path)]
    assert read == rows and "".join(json.dumps(r.to_dict()) + "\n" for r in read) == text
    assert list(rows[1].to_dict())[-1] == "mechanism_refused" and "mechanism_refused" not in rows[0].to_dict()
    assert read[0].model_config == ModelConfig(Layout.plain(2))
    (_, as_dict), _ = read_sweep(tmp_path)
    assert as_dict["final"] == final and as_dict["name"] == "d2_seed0"
    older = SweepRow.from_dict(_record())
    assert older.variant == "" and older.analysis is None and older.final.step == 20


def test_a_well_formed_sweep_jsonl_reports(tmp_path):
    from invperm_interp import Layout, ModelConfig

    runs = [_record(), _record(name="d3_seed0", model=ModelConfig(Layout.plain(3)).to_dict())]
    (tmp_path / "sweep.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    assert main(["sweep-report", str(tmp_path)]) == 0
    assert "d3_seed0" in (tmp_path / "sweep_report.md").read_text()


def test_the_sweep_report_says_how_with_the_index_labels_and_its_median_is_the_mean_of_two(
        tmp_path, capsys):
    """Per model kind: runs, solved, the median (of 800 and 1250: their mean 1025, not the upper
    1250) and the runs per mechanism, named by each run's typed record (its ``analysis``), not the
    line's ``mechanism`` text; the same tables and labels in index.html, which it writes too."""
    runs = [_record(steps_to_solve=800, mechanism="stale text"),
            _record(name="d2_seed1", steps_to_solve=1250), _record(name="d2_seed2", steps_to_solve=None,
                                                   final={"step": 20, "mse": 0.5, "row_acc": 0.0})]
    runs[0]["analysis"] = analysed("two_block").to_dict()
    runs[2]["analysis"] = analysed("none").to_dict()
    (tmp_path / "sweep.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    assert main(["sweep-report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "sweep_report.svg" in out and "index.html" in out
    report = (tmp_path / "sweep_report.md").read_text()
    assert "| causal [P; Y] → P | 3 | 2 of 3 | 1,025 | two_block 2, none 1 |" in report
    assert "the mean of the two middle values" in report and "stale text" not in report
    tables = [line for line in report.splitlines() if line.startswith("| ") and "---" not in line]
    page = (tmp_path / "index.html").read_text()
    for header in (tables[0], tables[2]):  # both headers are the index's, label for label
        assert all(f"<th>{h}</th>" in page or f"<th title='click to sort'>{h}</th>" in page
                   for h in map(html.escape, header.strip("| ").split(" | "))), header
    assert f"<h1>Sweep {tmp_path.name}</h1>" in page  # as `invperm report` titles it too
    head = re.sub(r"<[^>]+>", "", page.split("<h2>Headline</h2>")[1].split("</div>")[0])
    assert "2 of 3 runs learn the task (MSE < 0.001) in a median 1,025 steps" in head.replace(
        "&lt;", "<")
    assert "mechanism by the rule: two_block 2, none 1" in head
