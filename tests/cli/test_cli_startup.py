"""The command line answers --help and argument errors without loading torch or TransformerLens."""

import subprocess
import sys

import pytest
from helpers import REPO

SRC = REPO / "src"
PROBE = """
import sys
from invperm_interp.cli import main
try:
    main({argv!r})
except SystemExit as e:
    code = e.code
heavy = sorted(m for m in ("torch", "transformer_lens", "submitit", "matplotlib") if m in sys.modules)
print("HEAVY", heavy, "CODE", code)
"""


@pytest.mark.parametrize("argv, code", [(["--help"], 0), (["train", "--help"], 0),
                                        (["sweep", "--help"], 0), (["train", "--bogus"], 2),
                                        (["nosuchcommand"], 2)])
def test_help_and_argument_errors_load_nothing_heavy(argv, code):
    out = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True,
                         text=True, env={"PYTHONPATH": str(SRC), "PATH": ""}, check=True)
    assert out.stdout.strip().splitlines()[-1] == f"HEAVY [] CODE {code}"


def test_the_package_still_exports_its_names_on_first_use():
    import invperm_interp

    assert invperm_interp.Layout.plain(3).d == 3
    assert "HookedDisentangledTransformer" in dir(invperm_interp)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        invperm_interp.nope  # noqa: B018


TRAIN_PROBE = """
import sys
from invperm_interp.cli import main
for argv in {argvs!r}:
    assert main(argv) in (0, None), argv
print("LOADED", sorted(m for m in ("transformer_lens", "torch._dynamo") if m in sys.modules))
"""


@pytest.mark.parametrize("recipe", ["adam", "paper"])
def test_training_and_resuming_load_neither_transformer_lens_nor_dynamo(tmp_path, recipe):
    """A training process stays small (benchmarks/train_memory.py): TransformerLens (~130 MB) and
    torch._dynamo (~70 MB, which torch.optim's step imports) stay out of it."""
    out = tmp_path / "run"
    train = ["train", "--d=3", "--steps=8", f"--recipe={recipe}", f"--out={out}", "--no-progress",
             "--threads=1", "--eval-every=4", "--eval-size=64", "--batch-size=16", "--device=cpu"]
    argvs = [train[:2] + ["--steps=4"] + train[3:],  # stop at step 4, then extend it to 8
             ["train", "--resume", str(out), "--steps=8", "--no-progress"]]
    result = subprocess.run([sys.executable, "-c", TRAIN_PROBE.format(argvs=argvs)],
                            capture_output=True, text=True, env={"PYTHONPATH": str(SRC), "PATH": ""})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "LOADED []"
    assert (out / "final.safetensors").is_file()


ANALYSIS_PROBE = """
import sys
from invperm_interp.cli import main
assert main({train!r}) in (0, None)
import invperm_interp.analysis, invperm_interp.analysis.sweep_record, invperm_interp.analysis.verdict
for argv in {argvs!r}:
    assert main(argv) in (0, None), argv
    print(argv[0], sorted({{m.split(".")[0] for m in sys.modules}}
                          & {{"transformer_lens", "transformers", "matplotlib"}}))
"""


@pytest.mark.slow
def test_analysing_a_run_loads_no_transformer_lens(tmp_path):
    """The analyses read weights and run plain forwards, so importing the analysis package, the
    record and the rule, ``invperm analyze`` (record and report) and ``invperm timeline`` keep
    TransformerLens (and ``transformers``, which it imports: ~3 s, ~150 MB) out of the process;
    it is imported only for hooks, a cache, patching or the export. The report draws its figures
    without matplotlib (~0.5 s to import), so ``invperm analyze`` loads none of it either
    (``invperm timeline`` draws its figure file with it)."""
    out = tmp_path / "run"
    train = ["train", "--d=3", "--steps=8", f"--out={out}", "--no-progress", "--threads=1",
             "--eval-every=4", "--eval-size=64", "--batch-size=16", "--device=cpu",
             "--checkpoint-every=4"]
    argvs = [["analyze", str(out), "--n=64"], ["timeline", str(out), "--n=64", "--quiet"]]
    result = subprocess.run([sys.executable, "-c", ANALYSIS_PROBE.format(train=train, argvs=argvs)],
                            capture_output=True, text=True, env={"PYTHONPATH": str(SRC), "PATH": ""})
    assert result.returncode == 0, result.stderr
    assert (out / "analysis.json").is_file() and (out / "report.html").is_file()
    loaded = [line for line in result.stdout.splitlines() if line.startswith(("analyze ", "timeline "))]
    assert loaded == ["analyze []", "timeline ['matplotlib']"]


def test_construct_loads_no_transformer_lens():
    """``invperm construct`` builds and verifies a construction with plain forwards: TransformerLens
    (and the ``datasets``/``pyarrow`` it imports, whose breakage gave a 28-line traceback) stays out
    of the process."""
    probe = ("import sys\nfrom invperm_interp.cli import main\n"
             "code = main(['construct', 'theorem2', '--d', '6'])\n"
             "print('CODE', code, 'TL', 'transformer_lens' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env={"PYTHONPATH": str(SRC), "PATH": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("theorem2: ")
    assert out.stdout.strip().splitlines()[-1] == "CODE 0 TL False"
