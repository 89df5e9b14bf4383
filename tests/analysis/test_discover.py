"""Discovery: a construction hidden from the registry is recovered from noisy, gauged models built
from it; the form ignores the gauge; the command line reads a directory of runs."""

import subprocess
import sys

import pytest
import torch

from invperm_interp.analysis import discover as discover_module
from invperm_interp.analysis import gauge_fix, perturb
from invperm_interp.analysis.discover import Proposal, discover, table
from invperm_interp.cli.main import main
from invperm_interp.config import TrainConfig
from invperm_interp.maths import constructions as C
from invperm_interp.maths.cells import Cell
from invperm_interp.runs import checkpoint as ckpt
from invperm_interp.runs.config_file import config_hash
from invperm_interp.runs.directory import RunDir


def _fixed(model):
    return [gauge_fix(b.attn.A.detach()[0].double(), model.stream, layer)
            for layer, b in enumerate(model.blocks)]


def test_a_hidden_construction_is_recovered_from_noisy_gauged_models(monkeypatch):
    hidden = C.REGISTRY["two_block"]
    models = {f"hidden{i}": perturb(C.build("two_block", 5, beta), gauge=3.0, noise=0.05, seed=i)
              for i, beta in enumerate((25.0, 35.0, 45.0))}
    models["named"] = perturb(C.build("appendix_b", 5, 30.0), gauge=3.0, seed=7)
    # the rule, and discovery, no longer know it (a copy: the registry's order is restored after)
    from invperm_interp.maths import registry

    hidden_registry = {k: v for k, v in C.REGISTRY.items() if k != "two_block"}
    monkeypatch.setattr(C, "REGISTRY", hidden_registry)
    monkeypatch.setattr(registry, "REGISTRY", hidden_registry)
    found = discover(models, n=512)
    assert found.reasons["named"] == "named appendix_b"
    assert len(found.proposals) == 1
    p = found.proposals[0]
    assert sorted(p.runs) == ["hidden0", "hidden1", "hidden2"]
    assert p.exact_from is not None and p.faithful_runs == 3
    # the proposal is the hidden construction: equal gauge-fixed weights at the same β
    spec = p.form.spec("proposal")
    monkeypatch.setitem(C.REGISTRY, "proposal", spec)
    monkeypatch.setitem(C.REGISTRY, "hidden", hidden)
    for a, b in zip(_fixed(C.build("proposal", 6, 50.0)), _fixed(C.build("hidden", 6, 50.0))):
        assert torch.allclose(a, b, atol=1e-9)
    assert p.form.read == "L2.x" and "two_block" not in C.REGISTRY
    # the snippet registers it
    namespace = {}
    exec(p.form.snippet("registered_here"), namespace)  # noqa: S102
    assert C.REGISTRY["registered_here"].beta_exact is not None
    assert "| `discovered_bidirectional_1` | 3 (3) | 3 |" in table(found)


def test_known_verdicts_are_used_instead_of_measuring_again(monkeypatch):
    """A sweep's recorded mechanisms (name, minimal circuit) stand in for the rule: discover groups
    the same form without running ``mechanism``."""
    from invperm_interp.analysis import discover as D
    from invperm_interp.analysis.faithfulness import Score
    from invperm_interp.analysis.mechanism import Mechanism
    from invperm_interp.analysis.minimal import MinimalCircuit

    models = {f"run{i}": perturb(C.build("two_block", 5, 30.0 + 10 * i), gauge=3.0, noise=0.05,
                                 seed=i) for i in range(2)}
    models["named"] = C.build("appendix_b", 5, 30.0)
    cells = ((0, 0, "pos.Y", "pos.P", "I"), (1, 0, "pos.P", "L1.x", "I"))

    def recorded(name, cells, read):
        minimal = MinimalCircuit(cells, read, True, Score(0.0, 1.0, 1.0), 0.9)
        return Mechanism(name, None, (), minimal)

    known = {k: recorded(None, cells, ("L2.x",)) for k in ("run0", "run1")}
    known["named"] = recorded("appendix_b", (), ())

    def refuse(*args, **kwargs):
        raise AssertionError("mechanism ran although the verdict was known")

    monkeypatch.setattr(D, "mechanism", refuse)
    found = discover(models, n=256, known=known)
    assert found.reasons == {"run0": "unnamed", "run1": "unnamed", "named": "named appendix_b"}
    (p,) = found.proposals
    assert sorted(p.runs) == ["run0", "run1"] and p.faithful_runs == 2
    assert p.form.cells == ((0, 0, "pos.Y", "pos.P", "I"), (1, 0, "pos.P", "L1.x", "I"))


def test_the_form_factors_out_the_gauge():
    """theorem2's -1 guard at (pos.P, pos.Y) equals +1 at (pos.P, pos.P) modulo the gauge: models
    with different random gauges give one form."""
    from invperm_interp.analysis.discover import form_of

    cells = [(0, 0, "pos.P", "x", "I"), (0, 0, "pos.P", "pos.Y", "-1"),
             (1, 0, "L1.pos.P", "pos.Y", "I")]
    forms = {form_of(perturb(C.build("theorem2", 5, 20.0), gauge=g, seed=s), cells, ("L2.x",))
             for g, s in ((0.0, 0), (3.0, 1), (5.0, 2))}
    assert len(forms) == 1
    (form,) = forms
    assert len(form.cells) == 3 and {c[0] for c in form.cells} == {0, 1}


def test_exact_from_is_where_the_error_stays_below_the_tolerance():
    def proposal(errors):
        return Proposal("p", None, (), tuple(errors), (), ())

    assert proposal([(5.0, 0.5), (10.0, 1e-8), (20.0, 1e-12)]).exact_from == 10.0
    assert proposal([(5.0, 1e-8), (10.0, 0.1), (20.0, 1e-9)]).exact_from == 20.0
    not_exact = proposal([(5.0, 0.5), (10.0, 0.3), (20.0, 0.2)])
    assert not_exact.exact_from is None and not_exact.best_error == 0.2


def test_min_runs_is_checked():
    with pytest.raises(ValueError, match="min_runs"):
        discover({}, min_runs=0)


@pytest.mark.slow
def test_the_command_reads_a_directory_of_runs(tmp_path):
    from helpers import run, small

    for seed in range(2):
        model_cfg, train_cfg = small(d=3, seed=seed, out_dir=str(tmp_path / f"run{seed}"))
        run(model_cfg, train_cfg)
    done = subprocess.run([sys.executable, "-m", "invperm_interp.cli", "discover", str(tmp_path),
                           "--n", "64", "--threads", "1"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # two tiny runs: a table of forms, or the one line saying why there is nothing to propose
    assert done.stdout.startswith(("| form | runs |", "nothing to propose: ")), done.stdout
    assert "models: 2 " in done.stdout
    empty = subprocess.run([sys.executable, "-m", "invperm_interp.cli", "discover",
                            str(tmp_path / "nothing")], capture_output=True, text=True)
    assert empty.returncode == 2 and "error" in empty.stderr and "Traceback" not in empty.stderr


def test_nothing_to_propose_is_one_line_saying_why_not_an_empty_table():
    from invperm_interp.analysis.discover import Discovery

    found = Discovery(forms={"a": None, "b": None}, reasons={"a": "named two_block",
                                                             "b": "no faithful minimal circuit"},
                      proposals=())
    text = table(found)
    assert "| form |" not in text
    assert text.startswith("nothing to propose: 0 unnamed runs with a faithful minimal circuit, 0 "
                           "of them idealised to 0 exact forms")
    assert text.endswith("models: 1 named two_block, 1 no faithful minimal circuit")


def finished_run(run_dir, name="two_block", d=3, beta=12.0):
    """A finished run directory whose final weights are a construction (nothing trained)."""
    model = C.build(name, d, beta)
    train_cfg = TrainConfig(steps=1, out_dir=str(run_dir))
    RunDir(run_dir).write_config(model.cfg, train_cfg)
    ckpt.save(RunDir(run_dir).final, ckpt.model_tensors(model),
              {"step": 1, "config_hash": config_hash(model.cfg, train_cfg)})
    return run_dir


@pytest.mark.parametrize("record", ["{", "[]", "null", '{"version": 2, "samples": 64, "seed": 0}',
                                    '{"version": "2", "samples": 64, "seed": 0}',
                                    '{"version": 2, "samples": 64, "seed": 0, "name": "none", '
                                    '"minimal_faithful": true, "minimal_cells": ["no cell"], '
                                    '"minimal_read": []}'])
def test_discover_measures_again_a_run_whose_mechanism_json_is_damaged(tmp_path, capsys, record):
    """The verdict is measured again, as ``report`` does: the same table as without the record
    (a bare JSON message, AttributeError, KeyError or TypeError tracebacks before)."""
    run = finished_run(tmp_path / "sweep" / "run")
    assert main(["discover", str(tmp_path / "sweep"), "--n", "64", "--quiet"]) == 0
    clean = capsys.readouterr().out
    RunDir(run).mechanism.write_text(record)
    assert main(["discover", str(tmp_path / "sweep"), "--n", "64", "--quiet"]) == 0
    assert capsys.readouterr().out == clean


def test_discover_checks_its_arguments_and_output_before_the_analysis(tmp_path, capsys, monkeypatch):
    """--threads 0 is refused as elsewhere; a --json that cannot be written (under a file, or a
    directory) fails before any run is analysed; a missing folder is made; --quiet prints the
    table alone."""
    finished_run(tmp_path / "sweep" / "run")
    (tmp_path / "a_file").write_text("")

    def analysed(*args, **kwargs):
        raise AssertionError("the analysis ran")

    with monkeypatch.context() as m:
        m.setattr(discover_module, "discover", analysed)
        with pytest.raises(SystemExit) as refused:  # argparse's: a usage line, then the error
            main(["discover", str(tmp_path / "sweep"), "--threads", "0"])
        assert refused.value.code == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            "invperm discover: error: argument --threads: threads must be an integer in [1, 1024], got 0")
        for argv, message in ((["--json", str(tmp_path / "a_file" / "p.json")],
                               f"{tmp_path / 'a_file'} cannot be written"),
                              (["--json", str(tmp_path)], f"--json {tmp_path} is a directory")):
            assert main(["discover", str(tmp_path / "sweep"), *argv]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and err[0].startswith(f"invperm discover: error: {message}"), err
    out = tmp_path / "new" / "p.json"
    assert main(["discover", str(tmp_path / "sweep"), "--n", "64", "--quiet", "--json", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and out.is_file()
    assert captured.out.startswith("nothing to propose: ")  # the run is two_block, named


def test_a_circuit_over_three_layers_of_one_head_is_grouped_as_it_is(monkeypatch):
    """A faithful minimal circuit spanning three layers of a 3 x 1 model (no two-layer placement
    holds it) is a form of its own: idealised, checked exact as a three-layer model, and its
    snippet registers it (the registry takes any depth)."""
    from dataclasses import replace

    from invperm_interp.analysis.mechanism import mechanism
    from invperm_interp.maths.registry import ConstructionSpec
    from invperm_interp.task import sample_batch

    # two_block's copy relayed through a middle layer: layer 2 copies layer 1's copy onward
    cells = ((0, "pos.Y", "pos.P", "I"), (1, "pos.Y", "pos.Y", "I"), (2, "pos.P", "L2.L1.x", "I"))
    spec = ConstructionSpec("relay", "test", "bidirectional", "plain", "P", "L3.x", True, cells)
    monkeypatch.setitem(C.REGISTRY, "relay", spec)
    models = {f"run{i}": perturb(C.build("relay", 4, 40.0), gauge=1.0, noise=0.01, seed=i)
              for i in range(2)}
    assert [m.cfg.n_layers for m in models.values()] == [3, 3]
    monkeypatch.delitem(C.REGISTRY, "relay")

    def unnamed(model):
        mech = mechanism(model, sample_batch(model.cfg.layout, 128,
                                             generator=torch.Generator().manual_seed(0)))
        placed = tuple((layer, 0, q, k, label) for layer, q, k, label in cells)
        return replace(mech, name=None, minimal=replace(mech.minimal, cells=placed, read=("L3.x",),
                                                        faithful=True))

    found = discover(models, n=128, known={k: unnamed(m) for k, m in models.items()})
    (proposal,) = found.proposals
    assert set(proposal.runs) == {"run0", "run1"} and proposal.form.spec("relay_again").n_layers == 3
    assert {c[0] for c in proposal.form.cells} == {0, 1, 2}
    assert proposal.exact_from is not None and proposal.faithful_runs == 2
    assert set(proposal.form.cells) == {Cell.of(c) for c in cells}
    namespace: dict = {}
    exec(proposal.form.snippet("relay_again"), namespace)  # noqa: S102
    assert C.REGISTRY.pop("relay_again").n_layers == 3


def test_a_form_is_held_with_its_signs_only_when_the_model_holds_them():
    from dataclasses import replace

    from invperm_interp.analysis.discover import signs_held
    from invperm_interp.analysis.faithfulness import Tester
    from invperm_interp.analysis.forms import Form
    from invperm_interp.task import sample_batch

    model = perturb(C.build("two_block", 5, 10.0), gauge=0.5, noise=0.02, seed=3)
    batch = sample_batch(model.cfg.layout, 64, torch.Generator().manual_seed(0),
                         dtype=torch.float64)
    spec = C.REGISTRY["two_block"]
    own = Form("bidirectional", "plain", "P", tuple(sorted(spec.cells)), spec.read_block)
    tester = Tester(model, batch)
    assert signs_held(own, model, tester)
    flipped = tuple(sorted(c._replace(label="-" + c.label) if c.layer == 1 else c
                           for c in spec.cells))
    assert not signs_held(replace(own, cells=flipped), model, tester)


def test_discovery_in_two_processes_is_discovery_in_one():
    """The per-run work spread over spawned processes (one thread each, the largest model first)
    gives the same table and record as in this process; a bad count is refused."""
    from invperm_interp.model.disentangled import DisentangledTransformer

    models = {f"two_block{i}": perturb(C.build("two_block", 4, 30.0), gauge=2.0, noise=0.05, seed=i)
              for i in range(2)}
    models["scratch"] = perturb(C.build("theorem3_superposed", 4), gauge=1.0, seed=3)
    models["random"] = DisentangledTransformer(C.build("two_block", 4).cfg, seed=0)
    one = discover(models, n=128)
    two = discover(models, n=128, workers=2)
    assert two.to_dict() == one.to_dict() and table(two) == table(one)
    assert one.reasons["two_block0"] == "named two_block"
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match=r"^workers must be an integer >= 1"):
            discover(models, n=128, workers=bad)


def test_ctrl_c_ends_discovery_and_its_workers_at_once_and_says_nothing_was_written(tmp_path):
    """The first Ctrl-C, sent to the command's process group while its workers run: exit status
    130, one line saying nothing was written and how to start again, and no worker left."""
    import os
    import signal
    import time

    for i in range(12):
        finished_run(tmp_path / "sweep" / f"run{i}", "theorem3_superposed", d=8, beta=None)
    proc = subprocess.Popen([sys.executable, "-m", "invperm_interp.cli", "discover",
                             str(tmp_path / "sweep"), "--workers", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    err = ""
    while "discover: runs" not in err:  # the workers' bar: the pool is running
        line = proc.stderr.readline()
        assert line or proc.poll() is None, err
        err += line
    os.killpg(proc.pid, signal.SIGINT)
    err += proc.communicate(timeout=120)[1]
    assert proc.returncode == 130, err
    assert "invperm discover: interrupted: nothing was written; run the same command again" in err
    for _ in range(50):  # the group empties as the parent's last helpers see it gone
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("a process of the command's group outlived it")
