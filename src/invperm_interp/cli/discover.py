"""The ``invperm discover`` subcommand: the minimal circuits of a directory's unnamed runs made exact
constructions, tested across the runs and proposed (``analysis.discover``)."""

from __future__ import annotations

import argparse
import json

PACKAGE_FILE = "<the package's discovered.json>"  # --register's default, resolved when it runs


def _recorded(run_dir, n: int, seed: int):
    """The mechanism a sweep recorded in the run's ``mechanism.json`` on ``n`` samples from ``seed``,
    or None (no record, one of another version, or measured otherwise)."""
    from ..analysis.sweep_record import SweepRecord
    from ..runs.directory import RunDir

    path = RunDir(run_dir).mechanism
    try:  # a damaged record is measured again, as ``report`` does
        record = SweepRecord.read(path) if path.is_file() else None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return record.mechanism if record is not None and (record.samples, record.seed) == (n, seed) \
        else None


def _cmd_discover(args: argparse.Namespace) -> None:
    """Find the runs below DIR, make the unnamed ones' minimal circuits exact forms, print the table
    and a snippet registering each proposal; with ``--json``, write the proposals there too."""
    import os
    from dataclasses import replace
    from pathlib import Path

    from .. import memory
    from ..analysis.discover import discover, table
    from ..runs.directory import RunDir, check_writable
    from ..sweep.run_rows import find_runs
    from ..training.progress import progress_bar
    from ..training.run import Run, unanalysable
    from .analyze import set_threads

    set_threads(args.threads)
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be an integer >= 1, got {args.workers}")
    if args.n < 2:
        raise ValueError(f"--n must be at least 2 (a standard error needs two samples), got {args.n}")
    if args.register == PACKAGE_FILE:  # resolved here: building the parser imports no torch
        from ..maths.registry import DISCOVERED

        args.register = str(DISCOVERED)
    if args.register:  # checked before the analysis, not after it
        check_writable(Path(args.register).resolve().parent,
                       "give --register a path in a folder you can write")
    if args.json:
        if Path(args.json).is_dir():
            raise ValueError(f"--json {args.json} is a directory; give a file name")
        check_writable(Path(args.json).resolve().parent,
                       "give --json a path in a folder you can write")
    say = (lambda *a: None) if args.quiet else print
    root = Path(args.dir)
    runs = [r.dir for r in find_runs(root) if RunDir(r.dir).is_finished]
    if not runs:
        raise ValueError(f"{root} holds no finished run (no {RunDir.FINAL} below it)")
    keys = {d: str(d.relative_to(root)) if d != root else d.name for d in runs}
    refused = {keys[d]: why for d in runs if (why := unanalysable(RunDir(d).read_config()[0]))}
    for key, why in refused.items():
        say(f"{key}: skipped, mechanism analysis refused: {why}")
    runs = [d for d in runs if keys[d] not in refused]
    models = {keys[d]: Run.load(d).analysis_model for d in runs}
    estimates = [memory.analysis_estimate(m.cfg, args.n, circuits=0) for m in models.values()]
    if estimates:  # the largest, refused before a sample is drawn, as analyze does
        memory.check(max(estimates, key=lambda e: e.total), args.max_memory)
    known = ({keys[d]: k for d in runs if (k := _recorded(d, args.n, args.seed)) is not None}
             if args.ablation == "zero" else {})  # a sweep records the rule's style
    if known:
        say(f"{len(known)} of {len(runs)} runs: the verdict their sweep recorded on the same "
              f"{args.n} samples (seed {args.seed}) is reused")
    try:
        found = discover(models, n=args.n, seed=args.seed, min_runs=args.min_runs, known=known,
                         ablation=args.ablation, workers=args.workers or os.cpu_count() or 1,
                         progress=lambda items, what: progress_bar(items, desc=f"discover: {what}",
                                                                   disable=args.quiet))
    except KeyboardInterrupt as err:  # Ctrl-C: the workers are ended; nothing was written
        from ..training.signals import Interrupted

        raise Interrupted("nothing was written; run the same command again to start over (the "
                          "verdicts a sweep recorded are reused)",
                          getattr(err, "signum", 2)) from None
    found = replace(found, forms={**found.forms, **dict.fromkeys(refused)},
                    reasons={**found.reasons, **{k: f"mechanism analysis refused: {why}"
                                                 for k, why in refused.items()}})
    print(table(found))
    for p in found.proposals:
        print(f"\n# {p.name}: {len(p.runs)} runs; "
              + (f"exact from beta {p.exact_from:g}" if p.exact_from is not None
                 else f"not exact (best error {p.best_error:.2g}): faithful on its runs, not a "
                      "construction")
              + "\n" + p.form.snippet(p.name))
    if args.json:
        Path(args.json).write_text(json.dumps(found.to_dict(), indent=1) + "\n")
        say(f"wrote {args.json}")
    if args.register:
        from ..analysis.registration import register_proposals

        done = register_proposals(found, models, path=Path(args.register), min_runs=args.min_runs)
        print("\n" + "\n".join(map(str, done)) if done else "\nnothing to register")
        if any(r.name for r in done):
            print(f"wrote {args.register}: review it like code (git diff)")


def add_discover_parser(sub) -> None:
    from .args import MAX_MEMORY_HELP, THREADS_HELP, add_command, seed, size, threads

    parser = add_command(sub, "discover", "make exact constructions of the minimal circuits of the "
                         "runs no construction names, and propose those faithful on several runs",
                         "invperm discover runs/census",
                         "invperm discover runs/census --json proposals.json")
    parser.add_argument("dir", help="a sweep or census directory (run folders below it)")
    parser.add_argument("--n", type=int, default=4096, help="samples each verdict is measured on")
    parser.add_argument("--seed", type=seed, default=12345,
                        help="seeds the evaluation samples (the grids' analysis seed, so a sweep's "
                        "recorded verdicts are reused)")
    parser.add_argument("--min-runs", type=int, default=2, help="runs a form needs to be proposed")
    parser.add_argument("--ablation", choices=("zero", "silence"), default="zero",
                        help="how the circuits' removed parts are removed: zeroed (the rule's), or "
                             "zeroed with every head a circuit leaves empty knocked out (silence)")
    parser.add_argument("--json", help="also write the proposals to this JSON file")
    parser.add_argument("--register", nargs="?", metavar="FILE", const=PACKAGE_FILE,
                        help="register each exact proposal faithful on --min-runs runs in the "
                        "registry's data file (default: the package's discovered.json)")
    parser.add_argument("--workers", type=int,
                        help="processes the runs' circuits are found and idealised in, one thread "
                             "each (default: one per core; 1: this process, with --threads)")
    parser.add_argument("--threads", type=threads, help=THREADS_HELP)
    parser.add_argument("--max-memory", type=size, metavar="SIZE", help=MAX_MEMORY_HELP)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=_cmd_discover)
