"""mkdocs hook: the committed results (``assets/``) and the notebook tour (``notebooks/``) live
beside ``docs/``, not in it; this adds them to the site under the same paths, so a page links
``../assets/census.md`` and the strict build checks that the file exists."""

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
    return ROLE.sub(r"\1", output) if page.file.src_uri == "api.md" else output
