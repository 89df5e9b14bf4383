"""The ``invperm analyze`` (alias ``report``) subcommand, and ``analyse_and_report``, which the demo
shares: a run's (or a construction's) analysis record and HTML report, or a directory's index page.
Kept out of ``cli`` so the command line loads nothing heavy until a command runs."""

from __future__ import annotations

import argparse

from .args import MAX_MEMORY_HELP, THREADS_HELP, HelpFormatter, describe, examples, size


def analyse_and_report(model, source: str, out_dir, metrics=None, *, n: int, seed: int,
                       train_cfg=None, bundle: str | None = None, quiet: bool = False,
                       max_memory: int | None = None, links: list[tuple[str, str]] | None = None):
    """Analyse ``model`` on ``n`` fresh samples (``analysis.analyze``), print the headline, write
    ``analysis.json`` (the ``ModelAnalysis`` record) and ``report.html`` into ``out_dir`` (nothing
    written when ``out_dir`` is None); returns the record. ``bundle``: the relative URL of a shared
    circuitsvis bundle (default: inlined); ``links``: the report's navigation, ``(label, URL)``."""

    import torch

    from .. import memory, sample_batch
    from ..analysis.record import analyze, headline
    from ..runs.directory import RunDir
    from ..viz.report import write_report

    cfg = model.cfg
    memory.check(memory.analysis_estimate(cfg, n), max_memory, model.device)
    generator = torch.Generator(device=model.device).manual_seed(seed)
    batch = sample_batch(cfg.layout, n, generator=generator, dtype=cfg.torch_dtype)
    result = analyze(model, batch, source)
    if not quiet:
        print(headline(result))
    if out_dir is not None:
        out = RunDir(out_dir)
        out.path.mkdir(parents=True, exist_ok=True)
        out.analysis.write_text(result.to_json())
        write_report(model, result, batch, out.report, metrics, title=source,
                     train_cfg=train_cfg, bundle=bundle, links=links)
        if not quiet:
            print(f"\nwrote {out.analysis} and {out.report}")
    return result


def _cmd_analyze(args: argparse.Namespace) -> None:
    """Circuit, per-cell templates, closest construction, ablations and the HTML report of a trained
    run (or of a construction); writes ``analysis.json`` and ``report.html`` into the run directory."""
    from pathlib import Path

    from ..maths import constructions
    from ..runs.directory import RunDir
    from ..training.run import Run

    if (args.run_dir is None) == (args.construction is None):
        raise ValueError("give a run directory or --construction NAME (one of them)")
    import torch

    if args.threads is not None or not torch.cuda.is_available():  # one thread on the CPU
        torch.set_num_threads(args.threads or 1)
    metrics = None
    if args.construction is not None:
        model = constructions.build(args.construction, args.d, args.beta, max_memory=args.max_memory)
        source, out_dir = f"construction {args.construction}", args.out
    else:
        run_dir = Path(args.run_dir)
        if not run_dir.is_dir():
            raise NotADirectoryError(f"run directory {run_dir} does not exist")
        if not RunDir(run_dir).config.is_file():  # a sweep or census: its index page
            _report_directory(run_dir, args)
            return
        if args.index_only or args.inline_bundle:
            raise ValueError("--index-only and --inline-bundle are for a directory of runs; "
                             f"{run_dir} is one run")
        run = Run.load(run_dir, step=args.step)
        model, metrics = run.model, run.metrics
        source = f"run {run_dir}" + ("" if args.step is None else f" at step {args.step}")
        out_dir = args.out or run_dir
    analyse_and_report(model, source, out_dir, metrics, n=args.n, seed=args.seed,
                       train_cfg=None if args.construction is not None else run.train_cfg,
                       max_memory=args.max_memory)


def _report_directory(root, args: argparse.Namespace) -> None:
    """``invperm report DIR`` on a directory of runs: a report for each run that has none (sharing
    one circuitsvis bundle, ``DIR/circuitsvis.js``, unless ``--inline-bundle``), then
    ``DIR/index.html``."""
    import os
    from pathlib import Path

    from tqdm import tqdm

    from ..runs.directory import RunDir
    from ..training.run import Run
    from ..viz.index import find_runs, report_links, write_index
    from ..viz.page import write_bundle

    if args.step is not None or args.out is not None:
        raise ValueError("--step and --out are for one run; DIR is a directory of runs")
    rows = find_runs(root)
    todo = [r for r in rows if not RunDir(r.dir).report.is_file() and RunDir(r.dir).is_finished]
    if todo and not args.index_only:
        shared = None if args.inline_bundle else write_bundle(root)
        for row in tqdm(todo, desc="run reports", unit="run"):
            run_dir = row.dir
            run = Run.load(run_dir)
            bundle = None if shared is None else Path(os.path.relpath(shared, run_dir)).as_posix()
            analyse_and_report(run.model, f"run {run_dir}", run_dir, run.metrics, n=args.n,
                               seed=args.seed, train_cfg=run.train_cfg, bundle=bundle, quiet=True,
                               max_memory=args.max_memory, links=report_links(root, rows, row))
        rows = find_runs(root)  # the new analyses name mechanisms
    path = write_index(root, rows)
    print(f"wrote {path} ({len(rows)} runs, {len(todo) if not args.index_only else 0} new reports)")


def add_analyze_parser(sub, name: str) -> None:
    about = ("circuit, templates, closest construction, ablations and an HTML report of a run or a "
             "construction; on a directory of runs, a report for each and an index page")
    analyze = sub.add_parser(name, help=about, description=describe(about),
                             formatter_class=HelpFormatter, epilog=examples(
                                 f"invperm {name} runs/demo/causal",
                                 f"invperm {name} runs/sweep_d   (every run's report and index.html)",
                                 f"invperm {name} --construction theorem3 --d 6 --out /tmp/t3"))
    analyze.add_argument("run_dir", nargs="?", help="a training run directory (gets analysis.json), "
                                                     "or a directory of runs (gets index.html)")
    analyze.add_argument("--step", type=int, default=None, help="a checkpoint step (default: final)")
    analyze.add_argument("--construction", help="analyze a construction instead (see construct --list)")
    analyze.add_argument("--d", type=int, default=10, help="task size of --construction")
    analyze.add_argument("--beta", type=float, default=None,
                         help="cell scale of --construction (default 100)")
    analyze.add_argument("--n", type=int, default=512, help="samples for patterns and ablations")
    analyze.add_argument("--seed", type=int, default=0, help="seeds the analysis batch")
    analyze.add_argument("--out", help="directory for analysis.json and report.html "
                                        "(default: the run directory)")
    analyze.add_argument("--threads", type=int, help=THREADS_HELP)
    analyze.add_argument("--max-memory", type=size, metavar="SIZE", help=MAX_MEMORY_HELP)
    analyze.add_argument("--index-only", action="store_true",
                         help="for a directory of runs: only the index page, no missing run reports")
    analyze.add_argument("--inline-bundle", action="store_true",
                         help="for a directory of runs: inline circuitsvis in every report instead "
                              "of sharing DIR/circuitsvis.js")
    analyze.set_defaults(func=_cmd_analyze)
