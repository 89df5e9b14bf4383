"""mkdocs hooks: the committed results (``assets/``) and the notebook tour (``notebooks/``) live
beside ``docs/``, not in it; this adds them to the site under the same paths, so a page links
``../assets/census.md`` and the strict build checks that the file exists. The tour is also run and
rendered as a page with its outputs, ``notebooks/tour.html`` (see :func:`tour_page`). After the
build, the search is made to work from the file system (see :func:`on_post_build`)."""

import base64
import hashlib
import html
import json
import logging
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
log = logging.getLogger("mkdocs.hooks")
EXTRA = ("assets", "notebooks")


def on_files(files, config):
    for folder in EXTRA:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and not path.name.startswith("."):
                files.append(File(path.relative_to(ROOT).as_posix(), src_dir=str(ROOT),
                                  dest_dir=config["site_dir"],
                                  use_directory_urls=config["use_directory_urls"]))
    files.append(File.generated(config, TOUR_PAGE, content=tour_page()))
    return files


# -- the notebook tour as a page --------------------------------------------------------------------
# notebooks/tour.ipynb is stored without outputs. At the build it runs top to bottom in a fresh
# kernel (one CPU thread, the repository's src/ first on the path, its temporary files in a folder
# removed afterwards), and its cells become the page notebooks/tour.md: markdown as markdown, code
# as code blocks, printed text as <pre>, PNG figures as inline data: images, HTML (circuitsvis, with
# its bundle inlined) as it is. The executed notebook is kept in build/notebook/, named by a hash of
# the notebook, the package's sources and what installs them: a build with none of them changed
# renders the kept one instead of running it again.

NOTEBOOK = ROOT / "notebooks" / "tour.ipynb"
TOUR_PAGE = "notebooks/tour.md"
CACHE = ROOT / "build" / "notebook"
#: What a cell's outputs become, by placeholder: text and figures go into the page's content (the
#: search indexes the printed text), HTML only into the written page (the search would index the
#: circuitsvis bundle's source as text).
_OUTPUTS: dict[str, str] = {}
_HTML: dict[str, str] = {}
PLACEHOLDER = re.compile(r'<div data-nb-output="(\d+)"></div>')
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: A tqdm bar's line ("100%|████| 16/16 [00:00<00:00, 276.88it/s]"), and tqdm's warning that it
#: cannot draw a widget bar (with the line of source Python prints under a warning).
NOISE = re.compile(r"^\s*(\d+%\|.*\|.*\]|.*TqdmWarning.*|from \.autonotebook import .*)\s*$")
ABOUT = ("*This page is the notebook [`notebooks/tour.ipynb`](tour.ipynb) run top to bottom when "
         "this site was built, with what it printed and drew. `make notebook` opens it in "
         "JupyterLab.*")
STYLE = """<style>
.nb-output { background: #f6f8f6; border-left: 3px solid #9bb89b; padding: .5rem .75rem;
             white-space: pre-wrap; overflow-wrap: anywhere; }  /* long lines wrap, as in Jupyter */
.nb-stderr { background: #fbf4f2; border-left-color: #c98f80; }
.nb-html { overflow-x: auto; max-width: 100%; margin-bottom: 1rem; }
.nb-figure { margin-bottom: 1rem; }
</style>"""


def _cache_key() -> str:
    digest = hashlib.sha256()
    sources = [NOTEBOOK, ROOT / "pyproject.toml", ROOT / "constraints.txt",
               *sorted((ROOT / "src").rglob("*.py"))]
    for path in sources:
        if path.is_file():
            digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def executed_tour():
    """The tour run top to bottom in a fresh kernel, or the run kept for the same sources."""
    import nbformat

    kept = CACHE / f"tour-{_cache_key()}.ipynb"
    if kept.is_file():
        return nbformat.read(kept, as_version=4)
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tour_build_") as tmp:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": tmp,
               "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"),
                                                         os.environ.get("PYTHONPATH")) if p)}
        # the kernel's own log (it warns that it listens on TCP) stays out of the build's output
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": tmp}}).execute(env=env,
                                                                      stderr=subprocess.DEVNULL)
    log.info(f"notebooks/tour.ipynb: executed in {time.perf_counter() - start:.0f} s")
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = kept.with_suffix(f".{os.getpid()}.tmp")
    nbformat.write(nb, partial)
    os.replace(partial, kept)  # whole, even with another build writing the same file
    for old in CACHE.glob("tour-*.ipynb"):
        if old != kept:
            old.unlink(missing_ok=True)
    return nb


def _text(text: str, stream: str = "stdout") -> str:
    """Printed text as it reads: ANSI codes gone, each line as its last carriage return left it,
    progress bars and tqdm's widget warning dropped; empty if nothing is left."""
    lines = [line.split("\r")[-1] for line in ANSI.sub("", text).split("\n")]
    kept = "\n".join(line for line in lines if not NOISE.match(line)).strip("\n")
    if not kept.strip():
        return ""
    css = "nb-output nb-stderr" if stream == "stderr" else "nb-output"
    return f'<pre class="{css}">{html.escape(kept)}</pre>'


def _output(out) -> tuple[str, bool]:
    """One output as HTML, and whether it is HTML of the notebook's own (not for the search)."""
    if out.output_type == "stream":
        return _text(out.text, out.name), False
    if out.output_type == "error":
        return _text("\n".join(out.traceback), "stderr"), False
    data = out.get("data", {})
    if "application/vnd.jupyter.widget-view+json" in data:  # a progress widget: nothing to read
        return "", False
    if "text/html" in data:
        # "<div .../>" does not close in HTML: the view's div would swallow the rest of the page
        view = re.sub(r"<(div|span)(\b[^<>]*?)\s*/>", r"<\1\2></\1>", data["text/html"])
        return f'<div class="nb-html">{view}</div>', True
    for kind in ("image/png", "image/jpeg"):
        if kind in data:
            image = "".join(data[kind].split())
            base64.b64decode(image, validate=True)
            return (f'<div class="nb-figure"><img src="data:{kind};base64,{image}" '
                    f'alt="the figure the cell above draws"></div>'), False
    if "text/plain" in data:
        return _text(data["text/plain"]), False
    return "", False


def tour_page() -> str:
    """notebooks/tour.md: the executed tour's cells, each output a placeholder filled in
    :func:`on_page_content` (text, figures) or :func:`on_post_page` (HTML)."""
    _OUTPUTS.clear()
    _HTML.clear()
    parts = []
    for index, cell in enumerate(executed_tour().cells):
        if cell.cell_type == "markdown":
            parts.append(cell.source)
            if index == 0:  # under the title: what this page is
                parts.append(ABOUT)
        elif cell.cell_type == "code":
            fence = "`" * max(3, 1 + max((len(r) for r in re.findall("`+", cell.source)), default=0))
            parts.append(f"{fence}python\n{cell.source}\n{fence}")
            for out in cell.outputs:
                shown, own = _output(out)
                if shown:
                    key = str(len(_OUTPUTS) + len(_HTML))
                    (_HTML if own else _OUTPUTS)[key] = shown
                    parts.append(f'<div data-nb-output="{key}"></div>')
    return "\n\n".join(parts) + "\n"


def _anchors(toc):
    for anchor in toc:
        yield anchor
        yield from _anchors(anchor.children)


def on_page_content(html_text, page, config, files):
    # "## 1. Train a model" gets the id "1-train-a-model", which is no CSS selector: the theme's
    # scroll spy throws on it. Such sections, on every page, become "section-1-train-a-model".
    for anchor in _anchors(page.toc):
        if anchor.id[:1].isdigit():
            html_text = html_text.replace(f'id="{anchor.id}"', f'id="section-{anchor.id}"', 1)
            anchor.id = f"section-{anchor.id}"
    if page.file.src_uri != TOUR_PAGE:
        return html_text
    return PLACEHOLDER.sub(lambda m: _OUTPUTS.get(m[1], m[0]), html_text)


# Docstrings cross-reference in Sphinx's roles (":class:`Run`"); the reference shows the name only.
ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc):(<code>)~?\.?")


def on_post_page(output, page, config):
    if page.file.src_uri == "api.md":
        output = ROLE.sub(r"\1", output)
    if page.file.src_uri == TOUR_PAGE:
        output = PLACEHOLDER.sub(lambda m: _HTML.get(m[1], m[0]), output)
        output = output.replace("</head>", STYLE + "</head>", 1)
    # each table in a box of its own that scrolls sideways when the table is wider than the page
    # (docs/css/extra.css), so the page itself never does
    return TABLE_END.sub("</table></div>", TABLE_START.sub(r'<div class="table-scroll">\g<0>', output))


TABLE_START, TABLE_END = re.compile(r"<table\b"), re.compile(r"</table>")


def on_post_build(config):
    """The theme's search runs in a Worker that fetches ``search/search_index.json``; a page opened
    as a file (``file://``, origin ``null``) may do neither, so the search box found nothing. The
    index is written again as a script (``search/search_index.js``, setting
    ``window.mkdocs_search_index``) and ``docs/js/search.js``, which loads it and ``lunr.js`` with
    ``<script>`` tags and searches in the page, takes the place of the theme's ``search/main.js``."""
    search = Path(config["site_dir"]) / "search"
    if not (search / "search_index.json").exists():
        return
    index = json.loads((search / "search_index.json").read_text(encoding="utf-8"))
    text = json.dumps(index, ensure_ascii=True, separators=(",", ":")).replace("</", "<\\/")
    (search / "search_index.js").write_text(f"window.mkdocs_search_index = {text};\n",
                                            encoding="utf-8")
    (search / "main.js").write_text((ROOT / "docs" / "js" / "search.js").read_text(encoding="utf-8"),
                                    encoding="utf-8")
    (search / "worker.js").unlink(missing_ok=True)
