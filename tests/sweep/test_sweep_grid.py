"""Sweep grids that say what the census says (seeds per variant or per axis value), the grids and
arguments a sweep refuses in one line, and ``--dry-run``: nothing here trains."""

import re

import pytest
from helpers import REPO

from invperm_interp.cli import main
from invperm_interp.sweep.grid import load_grid
from invperm_interp.sweep.plan import units

BASE = """
[model]
d = [2, 3]
attention_dir = "bidirectional"
[train]
steps = 20
batch_size = 16
eval_every = 5
eval_size = 32
device = "cpu"
"""


def grid_file(tmp_path, text, name="grid.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def names(path):
    return [j.name for j in load_grid(path).jobs]


def test_seeds_per_axis_value_with_a_default(tmp_path):
    path = grid_file(tmp_path, 'seeds = {default = 1, "d=3" = {start = 4, stop = 6}}' + BASE)
    assert names(path) == ["d2_seed0", "d3_seed4", "d3_seed5"]


def test_seeds_inside_variants_replace_the_top_level_ones(tmp_path):
    text = """seeds = 2
[train]
steps = 5
[[variants]]
name = "bi"
model = { attention_dir = "bidirectional", d = 2 }
seeds = [7]
[[variants]]
name = "causal"
model = { d = 2 }
"""
    path = grid_file(tmp_path, text)
    assert names(path) == ["bi_seed7", "causal_seed0", "causal_seed1"]
    grid = load_grid(path)
    assert [j.variant for j in grid.jobs] == ["bi", "causal", "causal"]


def test_the_census_grid_plans_64_seeds_at_d10_and_16_elsewhere():

    grid = load_grid(REPO / "analyses/grids/census.toml")
    counts = {}
    for job in grid.jobs:
        key = (job.model_cfg.attention_dir, job.model_cfg.d)
        counts[key] = counts.get(key, 0) + 1
    assert len(grid.jobs) == 224
    assert counts == {(a, d): 64 if d == 10 else 16 for a in ("bidirectional", "causal")
                      for d in (6, 8, 10, 12)}
    assert {j.train_cfg.stop_at_mse for j in grid.jobs} == {1e-3}
    assert grid.analysis == {"samples": 4096, "seed": 12345, "batches": 3, "mean_ablation": True,
                             "resample_ablation": True}


@pytest.mark.parametrize("seeds, key", [
    ('{default = 1, "d=9" = 2}', 'seeds."d=9": matches no point'),
    ('{"width=3" = 2}', "seeds.'width=3': 'width' is not a field"),
    ('{"d=2" = 1}', "seeds: no entry for the point"),
    ('{default = 1, "d3" = 2}', "seeds.'d3': a per-value key"),
    ('{default = 0}', "seeds.default: must be"),
    ('{default = 1, "d=2" = [1, 1]}', "seeds.'d=2': lists a seed twice"),
    ('{}', "seeds: is an empty table: give a count"),  # "max() arg is an empty sequence" before
    ('{start = 3, stop = 3}', "seeds: must be a count n >= 1"),
])
def test_a_bad_seeds_table_is_one_error_naming_the_key(tmp_path, seeds, key, capsys):
    path = grid_file(tmp_path, f"seeds = {seeds}" + BASE)
    with pytest.raises(ValueError, match="grid .*: " + key.replace("(", r"\(")):
        load_grid(path)
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["../escaped", "/tmp/abs", "a/b", ".hidden", 5])
def test_a_variant_name_must_be_a_plain_relative_name(tmp_path, name, capsys):
    value = f'"{name}"' if isinstance(name, str) else name
    path = grid_file(tmp_path, f"[[variants]]\nname = {value}\nmodel = {{ d = 2 }}\n")
    with pytest.raises(ValueError, match=r"variants\[0\]\.name: must be a plain name"):
        load_grid(path)
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not out.exists() and not (tmp_path / "escaped").exists()


@pytest.mark.parametrize("workers", ["-1", "0"])
def test_workers_below_one_are_refused_in_one_line(tmp_path, workers, capsys):
    path = grid_file(tmp_path, "seeds = 1" + BASE)
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--workers", workers]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--workers must be a whole number >= 1" in err[0]
    assert not out.exists()


def test_a_seeds_key_matches_the_value_it_writes_not_only_its_text(tmp_path):
    """``"lr=1e-2"`` is the point ``lr = 1e-2`` (Python writes it 0.01); a bool is not a number."""
    text = 'seeds = {default = 1, "lr=1e-2" = [5, 6]}\n[model]\nd = 2\n[train]\nlr = [1e-2, 2e-2]\n'
    assert names(grid_file(tmp_path, text)) == ["lr0.01_seed5", "lr0.01_seed6", "lr0.02_seed0"]
    text = ('seeds = {default = 1, "n_heads=[2, 1]" = 2}\n[model]\nd = 2\nn_layers = 2\n'
            'n_heads = [[2, 1], [1, 1]]\n')
    assert names(grid_file(tmp_path, text)) == ["n_heads2-1_seed0", "n_heads2-1_seed1",
                                                 "n_heads1-1_seed0"]


def test_dry_run_says_a_grid_over_max_runs_needs_yes(tmp_path, monkeypatch, capsys):
    from invperm_interp.sweep import grid, plan

    monkeypatch.setattr(grid, "MAX_RUNS", 3)
    monkeypatch.setattr(plan, "MAX_RUNS", 3)
    path = grid_file(tmp_path, "seeds = 2" + BASE)  # 4 runs
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    assert "over 3 runs: the sweep needs --yes" in capsys.readouterr().out
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "over 3: check it with --dry-run, then pass --yes" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("seeds", ["1000000000", "{start = 0, stop = 1000000000}",
                                   '{default = 1000000000, "d=2" = 1}'])
def test_a_billion_seeds_are_refused_from_the_count_before_any_list_is_built(tmp_path, seeds):
    """Under a 1 GB address-space cap above the imports, ``--yes`` still refuses the grid from
    its count (the seed list was built first: MemoryError)."""
    import os
    import resource
    import subprocess
    import sys

    if resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY:
        pytest.skip("this process already runs under an address-space limit")
    path = grid_file(tmp_path, f"seeds = {seeds}" + BASE)
    script = ("import resource, sys\n"
              "from invperm_interp.cli import main\n"
              "used = next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') "
              "if l.startswith('VmSize:'))\n"
              "resource.setrlimit(resource.RLIMIT_AS, (used + 2**30, resource.RLIM_INFINITY))\n"
              f"sys.exit(main(['sweep', {str(path)!r}, '--yes', '--out', {str(tmp_path / 'o')!r}]))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        f"invperm sweep: error: grid {path}: seeds/axes: the grid has up to 2,000,000,000 runs, "
        "over 200,000: split it into several grids"]


@pytest.mark.parametrize("text", ["", "# nothing but a comment\n", "seeds = 3\n", "[model]\n",
                                  "seeds = 2\n[train]\n", "[model]\n[train]\n",
                                  '[[variants]]\nname = "a"\n'])
def test_an_empty_grid_is_refused_not_one_default_run(tmp_path, text, capsys):
    path = grid_file(tmp_path, text)
    out = tmp_path / "out"
    for extra in (["--dry-run"], []):  # a dry run first: without the check it trains
        assert main(["sweep", str(path), "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "the grid is empty" in err[0]
    assert not out.exists()


def test_a_huge_grid_needs_yes_and_a_million_runs_are_refused_before_building(tmp_path, capsys):
    path = grid_file(tmp_path, "seeds = 1000\n[model]\nd = [" + ", ".join(["2"] * 1000) + "]\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--yes"]) == 2
    assert "1,000,000 runs" in capsys.readouterr().err
    path = grid_file(tmp_path, "seeds = 12000\n[model]\nd = 2\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "12,000 runs" in err[0] and "--dry-run" in err[0] and "--yes" in err[0]
    assert not (tmp_path / "out").exists()


def test_a_grid_of_many_cpu_hours_needs_yes(tmp_path, capsys):
    # far over the limit (~10x at today's step prices), and the dry run asked first: were the
    # prices ever to fall under it, this fails here instead of training 400 runs
    path = grid_file(tmp_path, "seeds = 400\n[model]\nd = 16\n[train]\nsteps = 1000000\n")
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    shown = capsys.readouterr().out
    assert "400 runs" in shown and "CPU hours" in shown and "needs --yes" in shown
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "CPU hours" in err[0] and "--yes" in err[0]


def test_a_dry_run_of_one_run_says_run(tmp_path, capsys):
    path = grid_file(tmp_path, "seeds = 1" + BASE.replace("d = [2, 3]", "d = 2"))
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    shown = capsys.readouterr().out
    assert "grid grid: 1 run, 0 done" in shown and "1 runs" not in shown


def test_dry_run_prints_runs_units_cpu_time_and_memory_and_writes_nothing(tmp_path, capsys):
    path = grid_file(tmp_path, 'seeds = {default = 1, "d=3" = 2}' + BASE + "[slurm]\njobs_per_task = 2\n")
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--dry-run", "--workers", "2"]) == 0
    shown = capsys.readouterr().out
    assert "3 runs, 0 done, 3 to train" in shown
    assert "units of work: 3" in shown and "CPU time: about" in shown
    assert "0.0 CPU hours" not in shown and re.search(r"about \d+ CPU seconds", shown)  # a tiny grid
    assert "memory: about" in shown and "for 2 workers" in shown
    assert not out.exists()
    assert main(["sweep", str(path), "--out", str(out), "--dry-run", "--executor", "slurm"]) == 0
    assert "units of work: 2 (0 GPU buckets, 2 CPU units, up to 2 runs per task)" in \
        capsys.readouterr().out


def test_the_dry_run_warns_of_slurm_tasks_estimated_past_their_time_limit(tmp_path, capsys):
    from invperm_interp.sweep.plan import cpu_hours

    def grid_text(minutes):
        return ("seeds = 3" + BASE.replace("steps = 20", "steps = 100000")
                + f"[slurm]\ntime = {minutes}\njobs_per_task = 4\n")

    grid = load_grid(grid_file(tmp_path, grid_text(60)), allow_large=True)
    long, short = (cpu_hours(grid, u) * 60 for u in units(grid, tmp_path / "out", "slurm"))
    assert long > short + 2  # 4 runs, then 2
    minutes = round((long + short) / 2)
    for limit, shown in ((minutes, f"1 of 2 tasks may run past slurm.time ({minutes} minutes"),
                         (round(long) + 2, None)):
        path = grid_file(tmp_path, grid_text(limit))
        assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--dry-run", "--yes",
                     "--executor", "slurm"]) == 0
        out = capsys.readouterr().out
        assert (shown in out) if shown else ("past slurm.time" not in out)


def test_jobs_per_task_groups_cpu_runs_on_slurm(tmp_path):
    grid = load_grid(grid_file(tmp_path, "seeds = 2" + BASE + "[slurm]\njobs_per_task = 3\n"))
    assert sorted(map(len, units(grid, tmp_path / "out", "slurm"))) == [1, 3]
    assert sorted(map(len, units(grid, tmp_path / "out", "local"))) == [1, 1, 1, 1]


def test_a_slurm_time_within_the_checkpoint_signal_lead_is_refused(tmp_path):
    """Slurm sends the checkpoint signal 90 s before the limit on its once-a-minute check: at
    time = 2 tasks got it 2-30 s after they started and never finished; 4 minutes leave 90 s."""
    for minutes, sure in ((1, 0), (2, 0), (3, 30)):
        with pytest.raises(ValueError, match=f"slurm.time: {minutes} minute\\(s\\) leaves a task "
                                             f"{sure} s for sure: .* give at least 4"):
            load_grid(grid_file(tmp_path, "seeds = 1" + BASE + f"[slurm]\ntime = {minutes}\n"))
    assert load_grid(grid_file(tmp_path, "seeds = 1" + BASE + "[slurm]\ntime = 4\n")).slurm["time"] == 4


@pytest.mark.parametrize("value, key", [
    ("{batches = 0}", "mechanism.batches"),
    ("{samples = 1}", "mechanism.samples"),
    ("{mean_ablation = 1}", "mechanism.mean_ablation"),
    ("{resample_ablation = \"yes\"}", "mechanism.resample_ablation"),
    ("{sample = 10}", "mechanism.sample"),
    ("3", "mechanism"),
])
def test_a_bad_mechanism_setting_names_its_key(tmp_path, value, key):
    path = grid_file(tmp_path, f'name = "g"\nseeds = 1\nmechanism = {value}\n[model]\nd = 3\n')
    with pytest.raises(ValueError, match=rf"{key}\b.*must be true, false or"):
        load_grid(path)


def test_mechanism_settings_fill_in_the_defaults(tmp_path):
    path = grid_file(tmp_path, 'name = "g"\nseeds = 1\nmechanism = {batches = 3}\n[model]\nd = 3\n')
    assert load_grid(path).analysis == {"samples": 4096, "seed": 0, "batches": 3,
                                        "mean_ablation": False, "resample_ablation": False}


@pytest.mark.parametrize("table, key", [
    ('[model]\nd = 3\nn_layers = [2, 0]', "model.n_layers = 0: n_layers must"),
    ('[model]\nd = 0', "model.d = 0: d must"),
    ('[model]\nd = 3\nn_scratch = 2', "model.n_scratch = 2: n_scratch needs"),
    ('[model]\nd = 3\nlayout = "zigzag"', "model.layout = 'zigzag': layout must"),
    # messages that do not start with the key: 'd_model, d_head belong …', "recipe='paper' …"
    ('[model]\nd = 3\nd_model = 8\nd_head = 2', "model.d_model = 8: d_model, d_head belong"),
    ('[model]\nd = 3\n[train]\nrecipe = "paper"\nlr = 0.5', "train.lr = 0.5: recipe='paper'"),
    ('[model]\nd = 3\n[train]\nstop_at_mse = -1.0', "train.stop_at_mse = -1.0: stop_at_mse must"),
    # a field both configurations have is named in the section that refused it
    ('[model]\nd = 3\ndtype = "float64"\n[train]\ndtype = "half"', "train.dtype = 'half': dtype must"),
])
def test_a_bad_config_value_is_one_error_naming_its_grid_key(tmp_path, table, key):
    """The key comes from the configuration error's field, also where its message does not start
    with it."""
    with pytest.raises(ValueError, match=re.escape(f"grid {tmp_path / 'grid.toml'}: {key}")):
        load_grid(grid_file(tmp_path, table))


def test_the_dry_runs_memory_counts_the_analysis_a_grid_asks_for(tmp_path):
    """A grid that names mechanisms on 4,096 samples under resample ablation is estimated at its
    analysis (the disentangled model's, plus the stand-ins), not at its small training step."""
    from invperm_interp import memory
    from invperm_interp.sweep.plan import run_memory

    grid = load_grid(grid_file(tmp_path, "seeds = 1" + BASE))
    job = grid.jobs[0]
    analysis = {"samples": 4096, "seed": 0, "batches": 1, "mean_ablation": True,
                "resample_ablation": True}
    training = run_memory(job)
    cfg = job.model_cfg
    want = memory.analysis_estimate(cfg, 4096).total + memory.standin_bytes(cfg, 4096, True)
    assert run_memory(job, analysis) == max(training, want) > training
    assert run_memory(job, {**analysis, "resample_ablation": False}) == max(
        training, memory.analysis_estimate(cfg, 4096).total + memory.standin_bytes(cfg, 4096, False))


@pytest.mark.parametrize("stem", ["my grid", "grïd"])
def test_a_grid_named_by_a_file_name_that_is_not_a_plain_name_says_so(tmp_path, stem, capsys):
    """A grid without ``name`` takes its file's name, which names its sweep folder; a file name
    that is not a plain name is refused saying so (a name is never made up: two files could be
    given one folder), and the grid is planned once it has a name."""
    path = grid_file(tmp_path, "seeds = 1" + BASE, name=f"{stem}.toml")
    assert main(["sweep", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(
        f"name: the grid's name defaults to its file name {stem!r}, which is not a plain name "
        "(letters, digits, '.', '_', '+', '-'): add name = \"...\" to the grid"), err
    path.write_text('name = "plain"\nseeds = 1' + BASE)
    assert main(["sweep", str(path), "--dry-run"]) == 0
    assert load_grid(path).name == "plain"


@pytest.mark.parametrize("text, key, message", [
    (f"seeds = [{2**62}]" + BASE, "seeds", "non-empty list of integers in [0, 2^62)"),
    (f"seeds = {{start = 0, stop = {2**62 + 1}}}" + BASE, "seeds",
     "non-empty list of integers in [0, 2^62)"),
    (f"seeds = 1\nmechanism = {{seed = {2**64}}}" + BASE, "mechanism.seed",
     f"seed must be an integer in [0, 2^62), got {2**64}"),
    ("seeds = 1\nmechanism = {seed = -1}" + BASE, "mechanism.seed",
     "seed must be an integer in [0, 2^62), got -1"),
    ("seeds = 1" + BASE + "threads = 100000\n", "train.threads = 100000",
     "threads must be an integer in [1, 1024], got 100000"),
])
def test_seeds_and_threads_have_the_command_lines_bounds_in_a_grid(tmp_path, text, key, message):
    """The same bounds as ``--seed`` and ``--threads``: a seed the runs or the analysis could
    not use (2^64 overflowed torch in the analysis) and a thread count that crashed libgomp are
    refused when the grid is read."""
    with pytest.raises(ValueError) as err:
        load_grid(grid_file(tmp_path, text))
    assert str(err.value).startswith(f"grid {tmp_path / 'grid.toml'}: {key}: ")
    assert str(err.value).endswith(message)


def test_the_dry_run_counts_a_training_step_once_per_distinct_shape(tmp_path, monkeypatch, capsys):
    """Runs that differ only by their seed (or their init) share one memory estimate: the real
    forward it counts (``footprint.saved_for_backward``, at two and three samples) runs once per
    distinct model, not once per run (a grid of 500 seeds took 232 s)."""
    from invperm_interp.training import footprint

    calls = []
    counted = footprint.saved_for_backward
    monkeypatch.setattr(footprint, "saved_for_backward",
                        lambda cfg, b, device="meta": calls.append((cfg.d, b)) or counted(cfg, b, device))
    footprint._cpu_counts.cache_clear()  # counts of earlier tests in this process
    text = "seeds = 6\n" + BASE.replace("[train]", 'init_scale = [0.01, 0.1]\n[train]')
    path = grid_file(tmp_path, text)
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    assert "24 runs, 0 done, 24 to train" in capsys.readouterr().out
    assert sorted(calls) == [(2, 2), (2, 3), (3, 2), (3, 3)]
