"""Every fenced code block of the README runs as written: the Python blocks in order as one
script, and each line of the command-line block through ``invperm``'s ``main`` at tiny sizes
(fewer steps and samples; the substitutions are listed here, and so are the lines not run)."""

import re
import shlex
import subprocess
import sys

import pytest
from helpers import REPO

from invperm_interp.cli import main

README = (REPO / "README.md").read_text()
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", README, flags=re.S | re.M)

#: Command-line lines not run here, and why.
NOT_RUN = {
    "invperm demo": "make demo runs it (minutes)",
    "runs/sweep_d": "needs a sweep; tests/sweep render a sweep's index",
    "runs/census": "needs a census; tests/analysis/test_discover.py runs discover on a sweep",
    "--help": "tests/cli/test_cli_help.py checks every --help",
}


def tiny(argv: list[str]) -> list[str]:
    """The same command at test sizes: at most 30 steps per run (resumes to 40), 64 analysis
    samples, checkpoints every 10 steps so that a timeline has some."""
    argv = list(argv)
    for flag, value in (("--steps", "30"), ("--n", "64")):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
    if argv[0] == "train":
        if "--resume" in argv:
            argv[argv.index("--steps") + 1] = "40"
        else:
            argv += [] if "--steps" in argv else ["--steps", "30"]
            argv += ["--checkpoint-every", "10"]
    if argv[0] in ("analyze", "report") and "--list" not in argv:
        argv += ["--n", "64"]
    if argv[0] == "construct" and "--list" not in argv:
        argv += ["--n", "16"]
    return argv


def command_lines() -> list[str]:
    (block,) = [body for lang, body in BLOCKS if lang == "bash" and "invperm construct" in body]
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [line for line in lines if line.startswith("invperm")]


def test_the_readme_has_the_blocks_this_test_runs():
    assert sum(lang == "python" for lang, _ in BLOCKS) >= 1
    assert len(command_lines()) >= 10


@pytest.mark.slow
def test_the_python_blocks_run_in_order_as_one_script(tmp_path):
    script = "\n".join(body for lang, body in BLOCKS if lang == "python")
    (tmp_path / "readme.py").write_text(script)
    done = subprocess.run([sys.executable, "readme.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env={"PYTHONPATH": str(REPO / "src"),
                                                       "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    # what the block's comments say it prints: layer 1's pattern shape and the mechanism's name
    assert "torch.Size([64, 1, 8, 8])" in done.stdout, done.stdout[-2000:]
    assert done.stdout.splitlines()[-1] == "two_block", done.stdout[-2000:]


@pytest.mark.slow
def test_every_command_line_runs_at_tiny_sizes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    ran = []
    for line in command_lines():
        if any(key in line for key in NOT_RUN):
            continue
        for part in line.split(";"):
            argv = tiny(shlex.split(part.strip())[1:])
            code = main(argv)
            assert code in (0, None), f"{line!r} ({argv}) exited {code}: {capsys.readouterr().err}"
            ran.append(argv[0])
    assert {"construct", "train", "analyze", "report", "timeline"} <= set(ran)
