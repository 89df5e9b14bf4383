"""The ``invperm timeline RUN`` subcommand: the mechanism over a run's checkpoints as a table,
``timeline.json`` and ``timeline.{png,svg}`` in the run directory (kept out of ``cli`` so the
command line loads nothing heavy until a command runs)."""

from __future__ import annotations

import argparse
import sys


def table(tl) -> str:
    """One line per checkpoint: step, MSE, rows exact, the rule's name, the final circuit alone
    (MSE, rows exact, faithful) and the cells' β."""
    lines = [f"{'step':>6s} {'MSE':>9s} {'rows':>6s}  {'mechanism':<30s} {'circuit MSE':>11s} "
             f"{'rows':>6s} {'faithful':>8s}  β per cell"]
    for s in tl.steps:
        betas = " ".join(f"{b:5.2f}" for b in s.betas)
        lines.append(f"{s.step:6d} {s.mse:9.4g} {s.rows_exact:6.1%}  {s.mechanism:<30s} "
                     f"{s.circuit.mse:11.4g} {s.circuit.rows_exact:6.1%} "
                     f"{'yes' if s.faithful else 'no':>8s}  {betas}")
    return "\n".join(lines)


def sparse_warning(tl, run: str) -> str | None:
    """One line when the checkpoints are too sparse to place the loss's fall
    (``analysis.timeline.sparse_fall``), naming what to run instead; ``None`` otherwise."""
    from ..analysis.timeline import sparse_fall

    fall = sparse_fall(tl)
    if fall is None:
        return None
    where = (f"before the first checkpoint (step {fall.checkpoint_after})"
             if fall.checkpoint_before is None else
             f"between checkpoints at steps {fall.checkpoint_before} and {fall.checkpoint_after}")
    retrain = ("train the run again with --checkpoint-dense-every 25 (a checkpoint every 25 steps "
               "until MSE < 1e-3)")
    fix = retrain if fall.checkpoint_before is None else (
        f"add --refine {fall.checkpoint_before}:{fall.by} (replays those steps), or {retrain}")
    return (f"the loss falls between steps {fall.after} and {fall.by} (MSE {fall.mse_after:.3g} to "
            f"{fall.mse_by:.3g}), {where}, so the checkpoints cannot place the transition; {fix}")


def _cmd_timeline(args: argparse.Namespace) -> None:
    """Analyse every checkpoint of RUN against its final circuit (``analysis.timeline``)."""
    import json
    from pathlib import Path

    import torch

    from .. import memory
    from ..analysis.timeline import refine, timeline
    from ..analysis.verdict import NONE
    from ..runs.checkpoint import atomic_write
    from ..runs.directory import RunDir, check_writable
    from ..training.run import Run
    from ..viz.heatmaps import save_figures
    from ..viz.timeline import cell_name, plot_timeline

    torch.set_num_threads(args.threads)
    run_dir = Path(args.run)
    if run_dir.is_dir():  # where the results go, checked before the checkpoints are analysed
        check_writable(Path(args.out) if args.out else run_dir, "write them elsewhere with --out")
    run = Run.load(run_dir)
    model = run.analysis_model  # refused before a sample is drawn, as analyze does
    memory.check(memory.analysis_estimate(model.cfg, args.n, circuits=0), args.max_memory,
                 model.device)
    tl = timeline(run, n=args.n, seed=args.seed, stride=args.stride, progress=not args.quiet)
    if args.refine is not None:
        start, end, every = args.refine
        tl, replayed = refine(tl, run_dir, start, end, every, progress=not args.quiet)
        met = f"{replayed.identical} of {replayed.compared}"
        print(f"{len(replayed.steps)} steps up to {end} (the multiples of {every}) trained again "
              f"from the checkpoint at step {start}: {met} stored checkpoints met bit for bit"
              + ("" if replayed.identical == replayed.compared else
                 f" (largest difference {replayed.largest_difference:.3g})"))
    circuit = "minimal circuit" if tl.final_mechanism == NONE else "cells"
    print(f"{tl.run}: final mechanism {tl.final_mechanism}; its {circuit} (template at "
          f"(query block, key block)), in the order of the β column:")
    for i, cell in enumerate(tl.cells):
        print(f"  [{i}] {cell_name(cell)}")
    print(table(tl))
    first, since = tl.first_faithful, tl.faithful_since
    if first is None:
        print("the final circuit is faithful at no checkpoint")
    else:
        print(f"the final circuit is first faithful at step {first}"
              + ("" if since == first else f", and at every checkpoint from step {since} on"))
    warning = sparse_warning(tl, args.run)
    if warning:
        sys.stdout.flush()  # the warning right under the line it qualifies
        print(f"invperm timeline: warning: {warning}", file=sys.stderr)
    out = Path(args.out) if args.out else run_dir
    out.mkdir(parents=True, exist_ok=True)
    path = out / RunDir.TIMELINE
    atomic_write(path, (json.dumps(tl.to_dict(), indent=1) + "\n").encode())
    png, svg = save_figures(plot_timeline(tl), path.with_suffix(".png"))
    print(f"wrote {path}, {png} and {svg}")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _window(text: str) -> tuple[int, int, int]:
    """``START:END`` or ``START:END:EVERY`` (every 5 steps by default)."""
    parts = text.split(":")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) not in (2, 3) or numbers[0] < 0 or numbers[1] <= numbers[0] \
            or (len(numbers) == 3 and numbers[2] < 1):
        raise argparse.ArgumentTypeError(f"expected START:END or START:END:EVERY with 0 <= START < "
                                         f"END and EVERY >= 1, got {text!r}")
    return numbers[0], numbers[1], numbers[2] if len(numbers) == 3 else 5


def add_timeline_parser(sub) -> None:
    from .args import MAX_MEMORY_HELP, add_command, seed, size, threads

    p = add_command(sub, "timeline", "the mechanism over a run's checkpoints: table, timeline.json "
                    "and a figure", "invperm timeline runs/bi",
                    "invperm timeline runs/scratch --stride 2 --n 256",
                    "invperm timeline runs/bi --refine 250:450")
    p.add_argument("run", help="the run directory (its checkpoints/ are analysed)")
    p.add_argument("--n", type=_positive, default=512, help="samples analysed")
    p.add_argument("--seed", type=seed, default=0, help="seed of the analysed batch")
    p.add_argument("--stride", type=_positive, default=1,
                   help="analyse every STRIDE-th checkpoint, counted back from the last")
    p.add_argument("--refine", type=_window, metavar="START:END[:EVERY]",
                   help="also analyse the steps after START (a step with a checkpoint) up to END "
                        "that are multiples of EVERY (default 5), and END, on weights trained "
                        "again from that checkpoint")
    p.add_argument("--out", help="where timeline.json and the figure go (default: the run)")
    p.add_argument("--threads", type=threads, default=1,
                   help="torch threads (these models are too small for more to pay)")
    p.add_argument("--max-memory", type=size, metavar="SIZE", help=MAX_MEMORY_HELP)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_timeline)
