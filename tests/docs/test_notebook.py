"""notebooks/tour.ipynb runs top to bottom in a fresh kernel (nbclient), offline, on one CPU
thread, with no progress bar or warning in its outputs; it is stored without outputs, every drawing
it makes is offline, and each number a cell prints is the one the sentence after it reads. The
docs site shows it run, with its outputs (docs/hooks.py): its figure, its circuitsvis view, no
console error and no request leaving the files, at 1400 and 800 px."""

import json
import os
import re
import time

import pytest
from browser import BROWSER, open_page
from helpers import REPO

NOTEBOOK = REPO / "notebooks" / "tour.ipynb"

#: What each reading (the markdown cell after a code cell) quotes, as the cell above prints it.
QUOTED = {
    "read-training": ["stopped at step 500 (stop_at_mse): MSE 7.20e-04, rows exact 100%"],
    "read-hooks": ["(256, 1, 8, 8)", "MSE 7.19e-04; with layer 1's attention uniform: 0.740"],
    "read-explain": ["layer 1 head 0: I at (pos.Y, pos.P) x 4.278 (score 0.997, raw 0.609)",
                     "layer 2 head 0: I at (pos.P, L1.x) x 4.422 (score 0.998, raw 0.587)"],
    "read-mechanism": [
        "two_block: its 2 cells alone get rows exact 100.0%, loss recovered 95% ± 0% (MSE 0.0488 "
        "vs the model's 0.000737, baseline 1); without them: MSE 0.643",
        "the batch: 4096 samples; the circuit's score: n = 512 of them",
        "rows exact 1.0000, 95% interval [1.0000, 1.0000]; loss recovered 0.9519, 95% interval "
        "[0.9512, 0.9526]",
        "minimal circuit: 2 cells, the same as two_block's: True"],
    "read-compare": [
        "layer 1 head 0: weight cosine 0.76, pattern distance 0.18",
        "layer 2 head 0: weight cosine 0.37, pattern distance 0.32",
        "layer 2's pattern distance on the P rows, which it reads out: 0.02",
        "layer 1 cell (pos.Y, pos.P): cosine 0.96; 66% of the trained head's norm², 93% of the "
        "built head's",
        "layer 2 cell (pos.P, L1.x): cosine 0.70; 34% of the trained head's norm², 95% of the "
        "built head's",
        "rounded outputs agree on 100%; MSE trained 7.2e-04, built 8.9e-33"],
    "read-floor": ["floor d/4 = 1.0; the causal model stops at step 300 with MSE 1.0037 = floor 1.0 "
                   "+ 0.0037 (causal_floor)"],
    "read-timeline": ["final circuit faithful from step 225"],
    "read-patching": ["largest difference from our model: 6.0e-07",
                      "[[0.1  0.11 0.11 0.1  0.04 0.07 0.09 0.06]\n"
                      " [0.01 0.01 0.01 0.01 0.21 0.25 0.25 0.23]]"],
}


def test_the_tour_is_stored_without_outputs():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert len(code) >= 9
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    # every reading sits right after the code cell whose output it reads
    ids = [c.get("id") for c in cells]
    for reading in QUOTED:
        assert reading in ids and cells[ids.index(reading) - 1]["cell_type"] == "code", reading


def test_the_page_shows_printed_text_as_it_reads():
    """docs/hooks.py's rendering of outputs: ANSI codes and progress bars gone, a carriage return's
    line redrawn, a circuitsvis "<div/>" closed, a PNG inline."""
    import importlib.util

    import nbformat

    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    stream = nbformat.v4.new_output("stream", name="stderr", text=(
        "  0%|          | 0/16 [00:00<?, ?it/s]\r100%|██████████| 16/16 [00:00<00:00, 276.88it/s]\n"
        "/x/tqdm/auto.py:21: TqdmWarning: IProgress not found. Please update jupyter and ipywidgets.\n"
        "  from .autonotebook import tqdm as notebook_tqdm\n"))
    assert hooks._output(stream) == ("", False)
    text = nbformat.v4.new_output("stream", name="stdout", text="\x1b[1mstep 1\rstep 2\x1b[0m <ok>\n")
    assert hooks._output(text) == ('<pre class="nb-output">step 2 &lt;ok&gt;</pre>', False)
    view = nbformat.v4.new_output("display_data", data={
        "text/html": '<div id="cv" style="margin: 15px 0;"/>\n<script>draw("cv")</script>',
        "text/plain": "<IPython.core.display.HTML object>"})
    assert hooks._output(view) == ('<div class="nb-html"><div id="cv" style="margin: 15px 0;"></div>'
                                   '\n<script>draw("cv")</script></div>', True)
    figure = nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0K\nGgo=\n"})
    assert 'src="data:image/png;base64,iVBORw0KGgo="' in hooks._output(figure)[0]


def printed(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o["output_type"] == "stream")


@pytest.mark.slow
def test_the_tour_runs_in_a_fresh_kernel_offline(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the tour's run directories go with tmp_path
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
    # nothing on stderr: no progress bar, no TqdmWarning
    noise = [o for c in nb.cells for o in c.get("outputs", [])
             if o.get("name") == "stderr" or "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert noise == [], noise
    # each reading's numbers are what the cell above printed
    ids = [c.get("id") for c in nb.cells]
    for reading, quotes in QUOTED.items():
        above = printed(nb.cells[ids.index(reading) - 1])
        for quote in quotes:
            assert quote in above, f"{reading} reads {quote!r}; the cell printed:\n{above}"
    # section 4's reading: the two largest β are the circuit's, the other 29 from 0.2306 to 2.906
    explained = printed(nb.cells[ids.index("read-explain") - 1])
    betas = sorted(float(b) for b in re.findall(r" x ([\d.]+) \(score", explained))
    assert len(betas) == 31 and betas[-2:] == [4.278, 4.422] and (betas[0], betas[-3]) == (0.2306, 2.906)


#: Read once the circuitsvis view has drawn: the page's figures, views, sideways overflow and the
#: resources it loaded.
SEEN = """(() => {
  const main = document.querySelector('[role=main]');
  return {
    images: [...main.querySelectorAll('img')].map(i => ({
      png: i.src.startsWith('data:image/png;base64,'), ok: i.complete && i.naturalWidth > 0,
      width: i.getBoundingClientRect().width})),
    views: [...main.querySelectorAll('.nb-html')].map(v => ({
      drawn: v.querySelectorAll('canvas, svg, table, span').length,
      width: v.getBoundingClientRect().width})),
    main: main.getBoundingClientRect().width,
    overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
    printed: [...main.querySelectorAll('pre.nb-output')].map(p => p.innerText).join('\\n'),
    resources: performance.getEntriesByType('resource').map(r => r.name),
  };
})()"""
#: The network blocked, and logged: a request the page makes shows in the log with its initiator.
OFFLINE = ("--disable-background-networking", "--disable-component-update",
           "--proxy-server=http://127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND")


@pytest.mark.slow
@pytest.mark.skipif(BROWSER is None,
                    reason="needs headless Chromium: apt-get install -y chromium (Debian/Ubuntu)")
@pytest.mark.parametrize("width", [1400, 800])
def test_the_site_shows_the_tour_run_with_its_figures(site, tmp_path, width):
    page = site / "notebooks" / "tour.html"
    # the front page's "notebook tour" opens this page, not the notebook's JSON
    assert re.search(r'<a href="notebooks/tour\.html">notebook tour</a>',
                     (site / "index.html").read_text())
    netlog = tmp_path / "netlog.json"
    with open_page(page.as_uri(), tmp_path / "profile", width=width,
                   flags=(*OFFLINE, f"--log-net-log={netlog}")) as browser:
        assert browser.wait_for("[...document.querySelectorAll('.nb-html')].every(v => "
                                "v.querySelectorAll('canvas, svg, table, span').length > 0)", 30)
        seen = browser.evaluate(SEEN)
        errors = browser.errors
    assert errors == []
    log = netlog.read_text() if netlog.is_file() else ""
    requested = [re.search(r'"url":"([^"]+)"', m[0])[1]
                 for m in re.finditer(r'\{[^{}]*"initiator":[^{}]*"url":"[^"]+"[^{}]*\}', log)]
    outside = [u for u in requested + seen["resources"] if not u.startswith(("file:", "data:", "blob:"))]
    assert outside == [], f"requests left the files: {outside}"
    assert seen["images"] and all(i["png"] and i["ok"] for i in seen["images"]), seen["images"]
    assert len(seen["views"]) == 1 and seen["views"][0]["drawn"] > 0, seen["views"]
    assert seen["views"][0]["width"] <= seen["main"] and seen["overflow"] <= 0, seen
    # what the cells printed is on the page as text, with none of tqdm's noise
    assert "n = 512" in seen["printed"] and "weight cosine 0.37" in seen["printed"]
    assert "Tqdm" not in seen["printed"] and "it/s]" not in seen["printed"]
