"""The ``invperm sweep`` and ``invperm sweep-report`` subcommands (kept out of ``cli`` so the
command line loads nothing heavy until a command runs)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .args import HelpFormatter, describe, examples


def _cmd_sweep(args: argparse.Namespace) -> None:
    """Train a grid's runs (skipping finished ones, resuming interrupted ones), write sweep.jsonl;
    or, with --dry-run, say what that would do; or, with --collect, only write sweep.jsonl."""
    from ..sweep.engine import check_workers, run_sweep

    if args.collect:
        from ..sweep.collect import collect

        grid, out = _grid_and_folder(args)
        if not out.is_dir():
            raise ValueError(f"--out must be the grid's sweep folder, found no folder at {out}")
        print(f"wrote {collect(grid, out)} ({_statuses(out)}); trained nothing")
        return
    if args.dry_run:
        from ..sweep.plan import dry_run

        check_workers(args.workers)
        grid, out = _grid_and_folder(args)
        print(dry_run(grid, out, args.executor, args.workers or os.cpu_count() or 1))
        return
    path = run_sweep(args.grid, args.out, executor=args.executor, workers=args.workers,
                     progress=not args.quiet, allow_large=args.yes)
    print(f"wrote {path}; `invperm sweep-report {path.parent}` makes its table and figure")


def _grid_and_folder(args: argparse.Namespace):
    """The grid (any size: nothing trains) and its sweep folder, ``--out`` or runs/<grid name>."""
    from ..sweep.grid import load_grid

    grid = load_grid(args.grid, allow_large=True, executor=getattr(args, "executor", None))
    return grid, Path(args.out if args.out is not None else Path("runs") / grid.name)


def _statuses(out: Path) -> str:
    """"3 finished, 1 unfinished": the runs of ``out/sweep.jsonl`` by status."""
    from collections import Counter

    from ..sweep.collect import read_sweep

    counts = Counter(record["status"] for _, record in read_sweep(out))
    return ", ".join(f"{n:,} {status}" for status, n in counts.most_common())


def _cmd_sweep_report(args: argparse.Namespace) -> None:
    """A sweep folder's tables (sweep_report.md, and index.html to read them in a browser) and
    figure (sweep_report.png and .svg)."""
    from ..sweep.report import write_sweep_report

    md, png = write_sweep_report(args.dir)
    print(f"wrote {md}, {md.parent / 'index.html'} (open it), {png} and {png.with_suffix('.svg')}")


def add_sweep_parsers(sub) -> None:
    about = "train a grid of runs (TOML) with submitit; resumable; writes sweep.jsonl"
    sweep = sub.add_parser("sweep", help=about, description=describe(about),
                           formatter_class=HelpFormatter, epilog=examples(
                               "invperm sweep analyses/grids/sweep_d.toml   (into runs/sweep_d)",
                               "invperm sweep analyses/grids/sweep_d.toml --executor slurm"))
    sweep.add_argument("grid", help="grid file, e.g. analyses/grids/sweep_d.toml")
    sweep.add_argument("--executor", choices=["local", "slurm", "debug"], default="local",
                       help="local: one process per core (default); slurm: a job array with the "
                            "grid's [slurm] table; debug: in this process")
    sweep.add_argument("--out", help="sweep folder (default runs/<grid name>)")
    sweep.add_argument("--workers", type=int, help="local worker processes (default: one per core)")
    sweep.add_argument("--dry-run", action="store_true",
                       help="print the planned runs, units of work, CPU time and memory; train nothing")
    sweep.add_argument("--collect", action="store_true",
                       help="write sweep.jsonl from the run folders as they are (every run of the "
                            "grid; untrained ones as unfinished); train nothing: a sweep's results "
                            "while it runs elsewhere, or a grid trained in parts")
    sweep.add_argument("--yes", action="store_true",
                       help="run a grid over the size bounds (10,000 runs or 500 CPU hours)")
    sweep.add_argument("--quiet", action="store_true", help="no progress lines")
    sweep.set_defaults(func=_cmd_sweep)

    about = ("a sweep folder's tables (sweep_report.md; index.html shows them in a browser) and "
             "figure (sweep_report.png and .svg): steps to solve and mechanisms")
    report = sub.add_parser("sweep-report", help=about, description=describe(about),
                            formatter_class=HelpFormatter,
                            epilog=examples("invperm sweep-report runs/sweep_d"))
    report.add_argument("dir", help="the sweep folder (holds sweep.jsonl)")
    report.set_defaults(func=_cmd_sweep_report)
