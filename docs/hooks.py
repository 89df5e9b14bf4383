"""mkdocs hooks: the committed results (``assets/``) and the notebook tour (``notebooks/``) live
beside ``docs/``, not in it; this adds them to the site under the same paths, so a page links
``../assets/census.md`` and the strict build checks that the file exists. After the build, the
search is made to work from the file system (see :func:`on_post_build`)."""

import json
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
EXTRA = ("assets", "notebooks")


def on_files(files, config):
    for folder in EXTRA:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and not path.name.startswith("."):
                files.append(File(path.relative_to(ROOT).as_posix(), src_dir=str(ROOT),
                                  dest_dir=config["site_dir"],
                                  use_directory_urls=config["use_directory_urls"]))
    return files


# Docstrings cross-reference in Sphinx's roles (":class:`Run`"); the reference shows the name only.
ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc):(<code>)~?\.?")


def on_post_page(output, page, config):
    if page.file.src_uri == "api.md":
        output = ROLE.sub(r"\1", output)
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
