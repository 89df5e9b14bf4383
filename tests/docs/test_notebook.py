"""notebooks/tour.ipynb runs top to bottom in a fresh kernel (nbclient), offline, on one CPU
thread; it is stored without outputs, and every drawing it makes is offline."""

import json
import os
import time

import pytest
from helpers import REPO

NOTEBOOK = REPO / "notebooks" / "tour.ipynb"


def test_the_tour_is_stored_without_outputs():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert len(code) >= 9
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)


@pytest.mark.slow
def test_the_tour_runs_in_a_fresh_kernel_offline(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    took = time.perf_counter() - start
    assert took < 120, f"the tour took {took:.0f} s"
    text = json.dumps([c.get("outputs", []) for c in nb.cells])
    assert "Traceback" not in text
    assert "two_block" in text  # the mechanism section names what the model runs
    assert "image/png" in text  # the timeline figure is drawn
    assert "unpkg.com" not in text  # circuitsvis drawn from the inlined bundle
