"""Shared output helpers for the analyses: every table is written as JSON and Markdown."""

from __future__ import annotations

import json
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def asset(name: str) -> Path:
    """Path of ``assets/name``, with its folder created."""
    path = ASSETS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def report_folder(source: Path, from_json: bool, update_assets: bool) -> Path:
    """Where a census report script writes: ``assets/`` with ``--update-assets``; else next to the
    runs (``source``, a sweep folder) or, with ``--from-json``, next to the JSON read. A JSON read
    from ``assets/`` itself is refused without ``--update-assets`` (ValueError): the report would
    overwrite the committed assets, and the JSON it was read from."""
    if update_assets:
        return ASSETS
    if not from_json:
        return source
    folder = source.resolve().parent
    if folder == ASSETS.resolve():
        raise ValueError(f"{source} is in assets/: pass --update-assets to rewrite the committed "
                         "assets, or copy the JSON elsewhere to write the report beside it")
    return source.parent


def fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def write_table(name: str, rows: list[dict], title: str, notes: str = "") -> None:
    """``assets/name.json`` (the rows) and ``assets/name.md`` (a Markdown table with a title)."""
    asset(f"{name}.json").write_text(json.dumps(rows, indent=2) + "\n")
    columns = list(rows[0])
    lines = [f"# {title}", "", notes, "" if notes else None,
             "| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(fmt(r[c]) for c in columns) + " |" for r in rows]
    asset(f"{name}.md").write_text("\n".join(x for x in lines if x is not None) + "\n")
    print(f"wrote assets/{name}.json and assets/{name}.md")


