"""Shared output helpers for the analyses: where a script writes (next to its runs, ``--out``, or
the checkout's ``assets/`` only with ``--update-assets``), and every table as JSON and Markdown."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"
REPRODUCE = Path("runs/reproduce")  # `make reproduce`'s runs, and its scripts' default output


def in_assets(path: Path) -> bool:
    """Whether ``path`` is the checkout's ``assets/`` or lies inside it."""
    resolved, assets = Path(path).resolve(), ASSETS.resolve()
    return resolved == assets or assets in resolved.parents


def outside_assets(folder: Path) -> Path:
    """``folder``, or ``ValueError`` when it is in ``assets/``: only ``--update-assets`` writes
    there (the committed tables and figures)."""
    if in_assets(folder):
        raise ValueError(f"{folder} is in assets/: pass --update-assets to rewrite the committed "
                         "assets, or choose another folder")
    return Path(folder)


def report_folder(source: Path, from_json: bool, update_assets: bool) -> Path:
    """Where a census report script writes: ``assets/`` with ``--update-assets``; else next to the
    runs (``source``, a sweep folder) or, with ``--from-json``, next to the JSON read. A JSON read
    from ``assets/`` itself is refused without ``--update-assets`` (ValueError): the report would
    overwrite the committed assets, and the JSON it was read from."""
    if update_assets:
        return ASSETS
    if not from_json:
        return outside_assets(source)
    if in_assets(source.parent):
        raise ValueError(f"{source} is in assets/: pass --update-assets to rewrite the committed "
                         "assets, or copy the JSON elsewhere to write the report beside it")
    return source.parent


def add_output_arguments(parser: argparse.ArgumentParser, default: str) -> None:
    """``--out DIR`` (the folder written; ``default`` says which it is without it) and
    ``--update-assets`` (write into the checkout's ``assets/`` instead): read by
    :func:`output_folder`."""
    parser.add_argument("--out", type=Path, help=f"the folder written (default: {default})")
    parser.add_argument("--update-assets", action="store_true",
                        help="write into the checkout's assets/ (the committed tables and figures) "
                        "instead")


def output_folder(args: argparse.Namespace, default: Path) -> Path:
    """Where a script writes: ``assets/`` with ``--update-assets``, else ``--out``, else ``default``.
    ``ValueError`` for both options at once, and for a folder in ``assets/`` without
    ``--update-assets``."""
    if args.update_assets:
        if args.out is not None:
            raise ValueError(f"--out {args.out} and --update-assets: give one of them")
        return ASSETS
    return outside_assets(args.out if args.out is not None else Path(default))


def output(folder: Path, name: str) -> Path:
    """Path of ``folder/name``, with its folder created."""
    path = Path(folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def write_table(folder: Path, name: str, rows: list[dict], title: str, notes: str = "") -> None:
    """``folder/name.json`` (the rows) and ``folder/name.md`` (a Markdown table with a title)."""
    output(folder, f"{name}.json").write_text(json.dumps(rows, indent=2) + "\n")
    columns = list(rows[0])
    lines = [f"# {title}", "", notes, "" if notes else None,
             "| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(fmt(r[c]) for c in columns) + " |" for r in rows]
    output(folder, f"{name}.md").write_text("\n".join(x for x in lines if x is not None) + "\n")
    print(f"wrote {Path(folder) / name}.json and {Path(folder) / name}.md")


def reproduce_output(script: str, doc: str, argv: list[str] | None) -> Path | int:
    """The output folder of a `make reproduce` script that takes only ``--out``/``--update-assets``
    (default runs/reproduce/), or the exit status 2 after :func:`refuse`'s one line."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_output_arguments(parser, str(REPRODUCE))
    args = parser.parse_args(argv)
    try:
        return output_folder(args, REPRODUCE)
    except ValueError as err:
        return refuse(script, err)


def refuse(script: str, message) -> int:
    """``script: error: message`` on stderr, one line; returns 2, the exit status of a bad argument."""
    print(f"{script}: error: {message}", file=sys.stderr)
    return 2
