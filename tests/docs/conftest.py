"""The documentation site, built strict once per test session for the tests that read it."""

import subprocess
import sys

import pytest
from helpers import REPO


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """``mkdocs build --strict`` into a fresh folder: the site as a reader opens it."""
    out = tmp_path_factory.mktemp("site") / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out
