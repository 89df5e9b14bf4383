"""The command line answers --help and argument errors without loading torch or TransformerLens."""

import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
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
