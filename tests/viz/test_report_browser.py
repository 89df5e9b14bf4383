"""The report in a real browser: headless Chromium with the network blocked loads the page, and
nothing leaves the file, no error is raised, every image decodes, every circuitsvis view draws, the
page paints before the circuitsvis bundle runs, and no table overflows its box at 800 px.

Skipped (with how to install it) when no Chromium is on the machine.
"""

import json
import re

import pytest
import torch
from browser import BROWSER, dump_dom_when

from invperm_interp import sample_batch
from invperm_interp.analysis.record import analyze
from invperm_interp.maths import constructions
from invperm_interp.runs.evaluation import Evaluation
from invperm_interp.viz.page import write_bundle
from invperm_interp.viz.report import ReportContext, write_report

pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="needs headless Chromium: apt-get install -y chromium (Debian/Ubuntu)")

# Runs first in <head>: records errors and console.error calls, before any script of the page, and
# the time the circuitsvis bundle defines CircuitsVis (its `var CircuitsVis = ...` calls the setter).
PROBE_HEAD = """<script>
window.__errors = [];
window.addEventListener('error', e => __errors.push(String(e.message || e.type)), true);
const __consoleError = console.error;
console.error = (...a) => { __errors.push(a.map(String).join(' ')); __consoleError(...a); };
let __cv;
Object.defineProperty(window, 'CircuitsVis', {configurable: true, get() { return __cv; },
  set(v) { __cv = v; window.__bundleAt = performance.now(); }});
</script>"""

# Runs after load: once every view has drawn and the layout has held still for three looks 150 ms
# apart (or 30 s have passed; polling, since a shared bundle loads after the first paint and a
# loaded machine takes its time), writes what it saw into the DOM, where the driver reads it. The
# wait for stillness matters: circuitsvis first puts a 1000 x 1000 canvas in the page and sizes it
# to its figure a frame or more later, so "a canvas exists" alone measured a page 231 px too wide
# 1 load in 6 under load.
PROBE_END = """<script>
window.addEventListener('load', () => {
  const __start = performance.now(); let __last = null, __still = 0;
  const __layout = () => JSON.stringify([document.documentElement.scrollWidth,
    ...[...document.querySelectorAll('div.cv *')].map(e => {
      const r = e.getBoundingClientRect(); return [r.left, r.right, r.top, r.bottom]; })]);
  const __probe = () => {
  const drawn = [...document.querySelectorAll('div.cv')]
    .every(d => d.querySelectorAll('canvas, svg, table, span').length > 0);
  const layout = __layout(); __still = drawn && layout === __last ? __still + 1 : 0; __last = layout;
  if (__still < 2 && performance.now() - __start < 30000) { setTimeout(__probe, 150); return; }
  const out = document.createElement('pre'); out.id = '__probe';
  out.textContent = JSON.stringify({
    errors: __errors,
    images: [...document.images].map(i => ({alt: i.alt, ok: i.complete && i.naturalWidth > 0})),
    views: [...document.querySelectorAll('div.cv')]
      .map(d => d.querySelectorAll('canvas, svg, table, span').length),
    resources: performance.getEntriesByType('resource').map(r => r.name),
    firstPaint: (performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime ?? null,
    bundleAt: window.__bundleAt ?? null,
    attention: [...document.querySelectorAll('figure.attn')].map(f => {
      const box = f.getBoundingClientRect(), inner = [...f.querySelectorAll('*')]
        .map(e => e.getBoundingClientRect()).filter(r => r.width > 0 && r.height > 0);
      return {left: box.left, top: box.top, right: box.right, bottom: box.bottom,
              drawnLeft: Math.min(...inner.map(r => r.left)),
              drawnRight: Math.max(...inner.map(r => r.right)),
              drawnBottom: Math.max(...inner.map(r => r.bottom))};
    }),
    pageOverflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
    overflow: [...document.querySelectorAll('table')].map(t => {
      const box = t.closest('div.table') || t.parentElement;
      return Math.max(box.scrollWidth - box.clientWidth,
                      t.getBoundingClientRect().right - document.documentElement.clientWidth);
    }),
  });
  document.body.appendChild(out);
}; setTimeout(__probe, 100); });
</script>"""


def _load(page, tmp_path, width: int = 1400) -> tuple[dict, list[str]]:
    """Open ``page`` (a file) in Chromium with the network blocked, in a window ``width`` pixels
    wide, in real time until the probe has written: its findings and every URL the browser's network
    log saw."""
    text = page.read_text()
    probed = page.with_name("probed_" + page.name)
    probed.write_text(text.replace("<head>", "<head>" + PROBE_HEAD, 1)
                      .replace("</body>", PROBE_END + "</body>", 1))
    netlog = tmp_path / "netlog.json"
    dom = dump_dom_when(probed.as_uri(), "document.getElementById('__probe')", tmp_path / "profile",
                        width=width, flags=("--disable-background-networking",
                                            "--disable-component-update",
                                            "--proxy-server=http://127.0.0.1:9",
                                            "--host-resolver-rules=MAP * ~NOTFOUND",
                                            f"--log-net-log={netlog}"))
    match = re.search(r'<pre id="__probe">(.*?)</pre>', dom, re.S)
    assert match, "the page did not finish loading in 60 s"
    found = json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&")
                       .replace("&lt;", "<").replace("&gt;", ">"))
    # Requests the page made carry an initiator; the browser's own (updates, time sync) do not.
    log = netlog.read_text() if netlog.is_file() else ""
    urls = [re.search(r'"url":"([^"]+)"', m.group(0)).group(1)
            for m in re.finditer(r'\{[^{}]*"initiator":[^{}]*"url":"[^"]+"[^{}]*\}', log)]
    return found, urls


@pytest.fixture(scope="module")
def report_page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    model = constructions.build("theorem3", 3)
    batch = sample_batch(model.cfg.layout, 32, torch.Generator().manual_seed(0), dtype=torch.float64)
    summary = analyze(model, batch, "construction theorem3")
    metrics = [Evaluation(s, 1.0 / (s + 1), 0.9, 0.5, 0.1, causal_floor=0.0) for s in (0, 10, 20)]
    single = write_report(model, summary, batch, tmp / "single" / "report.html",
                          ReportContext(metrics=metrics))
    write_bundle(tmp / "sweep")
    shared = write_report(model, summary, batch, tmp / "sweep" / "run0" / "report.html",
                          ReportContext(metrics=metrics, bundle="../circuitsvis.js"))
    return tmp, single, shared


@pytest.mark.parametrize("which", ["single", "shared"])
def test_report_loads_offline_without_errors_and_renders(report_page, which):
    tmp, single, shared = report_page
    page = single if which == "single" else shared
    found, urls = _load(page, tmp)
    assert found["errors"] == []
    outside = [u for u in urls + found["resources"] if not u.startswith(("file:", "data:", "blob:"))]
    assert outside == [], f"requests left the file: {outside}"
    assert len(found["images"]) == 8  # curve, accuracy, 2 gauge-fixed A, W_U, 2 raw A, Lemma 1
    assert all(image["ok"] and image["alt"] for image in found["images"]), found["images"]
    assert len(found["views"]) == 2 and all(n > 0 for n in found["views"]), found["views"]
    if which == "shared":  # the views drew from the shared copy: the page has none of its own
        assert "var CircuitsVis" not in page.read_text()
    views = found["attention"]  # side by side at 1400 px, with white space between them
    assert len(views) == 2 and views[0]["top"] == views[1]["top"], views
    assert views[0]["drawnRight"] + 8 <= views[1]["left"], views
    for v in views:  # each view draws inside its own figure
        assert v["left"] <= v["drawnLeft"] and v["drawnRight"] <= v["right"], v
        assert v["drawnBottom"] <= v["bottom"], v
    # the headline paints before the bundle (over a megabyte of script) is run
    assert found["firstPaint"] is not None and found["bundleAt"] is not None, found
    assert found["firstPaint"] < found["bundleAt"]


@pytest.mark.parametrize("which", ["single", "shared"])
def test_no_report_table_overflows_at_800_px(report_page, which):
    """Nor the page: it does not scroll sideways, and each attention view stays in its figure."""
    tmp, single, shared = report_page
    found, _ = _load(single if which == "single" else shared, tmp, width=800)
    assert found["overflow"] and max(found["overflow"]) <= 0, found["overflow"]
    assert found["pageOverflow"] <= 0, found["pageOverflow"]
    views = found["attention"]
    assert views and all(v["left"] <= v["drawnLeft"] and v["drawnRight"] <= v["right"]
                         for v in views), views


def test_no_index_table_overflows_at_800_px(tmp_path):
    """The widest index: sweep-sized names, floors written out, the longest mechanism names, and
    the steps-to-solve figure (two d) with its mechanisms, which draws."""
    import json

    from helpers import analysed
    from test_index import _fake_run

    from invperm_interp.sweep.run_rows import find_runs, index_title
    from invperm_interp.viz.index import write_index

    records = []
    for d in (8, 10):
        for seed in range(3):
            for attention, mses, floor in (("bidirectional", [2.0, 1e-4], 0.0),
                                           ("causal", [2.6, 2.503912], 2.5)):
                name = f"{attention}_scratch_d{d}_seed{seed}"
                config = _fake_run(tmp_path / name, d, seed, attention, mses, floor)
                records.append({"name": name, "status": "finished", "step": 200,
                                "steps_to_solve": 200 if floor == 0 else None, "solve_mse": 1e-3,
                                "final": {"step": 200, "mse": mses[-1], "row_acc": 1.0,
                                          "causal_floor": floor},
                                "mechanism": None, **config,
                                "analysis": analysed("theorem3_superposed_complement").to_dict()})
    (tmp_path / "sweep.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    found, _ = _load(write_index(tmp_path, find_runs(tmp_path), index_title(tmp_path)), tmp_path, width=800)
    assert found["errors"] == [] and found["overflow"], found
    assert max(found["overflow"]) <= 0 and found["pageOverflow"] <= 0, found
    assert found["images"] and all(i["ok"] for i in found["images"]), found["images"]


def test_the_probe_sees_a_request_that_leaves_the_file(tmp_path):
    page = tmp_path / "leaky.html"
    page.write_text("<!DOCTYPE html><html><head></head><body>"
                    "<img alt='x' src='http://example.invalid/x.png'></body></html>")
    found, urls = _load(page, tmp_path)
    assert "http://example.invalid/x.png" in urls + found["resources"]
    assert found["images"] == [{"alt": "x", "ok": False}]


def test_index_table_sorts_by_a_clicked_column(tmp_path):
    from test_index import _fake_run

    from invperm_interp.sweep.run_rows import find_runs, index_title
    from invperm_interp.viz.index import write_index

    for seed, last in enumerate((1e-4, 0.3, 2e-3)):
        _fake_run(tmp_path / f"run{seed}", 4, seed, "bidirectional", [2.0, last], 1.0)
    page = write_index(tmp_path, find_runs(tmp_path), index_title(tmp_path))
    click = """<script>window.addEventListener('load', () => {
      const th = [...document.querySelectorAll('th')].find(t => t.textContent === 'final MSE');
      th.click(); th.click();  // ascending, then descending
      const out = document.createElement('pre'); out.id = 'order';
      out.textContent = [...document.querySelectorAll('table.sortable tbody tr')]
        .map(r => r.cells[0].textContent.split(' ')[0]).join(',');
      document.body.appendChild(out); });</script>"""
    page.write_text(page.read_text().replace("</body>", click + "</body>"))
    dom = dump_dom_when(page.as_uri(), "document.getElementById('order')", tmp_path / "profile")
    assert re.search(r'<pre id="order">(.*?)</pre>', dom).group(1) == "run1,run2,run0"
