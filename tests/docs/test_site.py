"""The documentation site builds strict (broken links, missing references and unknown names fail
it), offline, and every Python block of every page runs as written: a page's blocks in order as one
script, in a fresh process."""

import importlib
import re
import subprocess
import sys

import pytest
from helpers import REPO

PAGES = sorted((REPO / "docs").rglob("*.md"))
PACKAGES = ["invperm_interp", *(f"invperm_interp.{p}" for p in
                                ("model", "maths", "runs", "training", "sweep", "analysis", "viz"))]


def python_blocks(path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(), flags=re.S | re.M)


def test_the_guides_carry_code_and_the_nav_names_every_page():
    assert sum(bool(python_blocks(p)) for p in PAGES) >= 4
    nav = (REPO / "mkdocs.yml").read_text().split("\nnav:")[1]
    for page in PAGES:
        assert page.relative_to(REPO / "docs").as_posix() in nav, page


@pytest.mark.slow
def test_the_site_builds_strict_offline(site):
    api = set(re.findall(r'id="(invperm_interp[\w.]*)"', (site / "api.html").read_text()))
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:  # every public name has its entry, under its package or home
            assert f"{package}.{name}" in api or any(a.endswith(f".{name}.{name}") for a in api), \
                f"{package}.{name} is not in the API reference"
    assert ":class:" not in (site / "api.html").read_text()  # roles shown as names
    assert "https://" not in (site / "guide" / "model.html").read_text().split(
        "<body")[0]  # nothing in the head is loaded from the network


#: Runs each page's blocks, in order, as one script in its own namespace, all pages in one process
#: (one import of torch and TransformerLens instead of one per page); a failure names its page.
RUNNER = """
import sys, traceback
for path, source in PAGES:
    try:
        exec(compile(source, path, "exec"), {"__name__": "__main__"})
    except BaseException:
        traceback.print_exc()
        sys.exit(f"{path}: a Python block failed")
"""


@pytest.mark.slow
def test_every_python_block_of_every_page_runs(tmp_path):
    pages = [(p.relative_to(REPO).as_posix(), "\n".join(python_blocks(p)))
             for p in PAGES if python_blocks(p)]
    (tmp_path / "pages.py").write_text(f"PAGES = {pages!r}\n{RUNNER}")
    done = subprocess.run([sys.executable, "pages.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin",
                                            "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
