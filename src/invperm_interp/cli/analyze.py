"""The ``invperm analyze`` (alias ``report``) subcommand, and ``analyse_and_report``, which the demo
shares: a run's (or a construction's) analysis record and HTML report, or a directory's index page.
Kept out of ``cli`` so the command line loads nothing heavy until a command runs."""

from __future__ import annotations

import argparse
import signal

from .args import MAX_MEMORY_HELP, THREADS_HELP, HelpFormatter, describe, examples, size


def analyse_and_report(model, out_dir, context, *, n: int, seed: int, quiet: bool = False,
                       max_memory: int | None = None):
    """Analyse ``model`` on ``n`` fresh samples (``analysis.analyze``; a standard model through its
    exact map to the disentangled model), print the headline, write ``analysis.json`` (the
    ``ModelAnalysis`` record, its source ``context.title``) and ``report.html`` into ``out_dir``
    (nothing written when ``out_dir`` is None); returns the record. ``context``: the report's
    ``viz.report.ReportContext`` (what ``out_dir`` holds is added to it)."""

    from pathlib import Path

    import torch

    from .. import memory, sample_batch
    from ..analysis.budget import analysis_estimate
    from ..analysis.record import analyze, check_finite_norm, headline
    from ..analysis.templates import explain_and_match
    from ..model.build import analysis_model
    from ..runs.directory import RunDir, check_writable
    from ..viz.report import write_report

    if out_dir is not None:  # checked before the analysis, not after it
        check_writable(Path(out_dir), "write the record and report elsewhere with --out")
    analysed = model
    model = analysis_model(model)  # what the report draws; analyze maps it again, cheaply
    cfg = model.cfg
    floor = memory.analysis_estimate(cfg, n, circuits=0)  # refused before the atoms are fitted
    try:
        memory.check(floor, max_memory, model.device)
    except memory.MemoryBudgetError:
        _refuse_in_full(model, n, max_memory)
        raise
    check_finite_norm(model)  # before the atoms are fitted: their shares square the weights
    explained = explain_and_match(model)  # what the searches will hold depends on the atoms
    memory.check(analysis_estimate(model, n, explained[0]), max_memory, model.device)
    generator = torch.Generator(device=model.device).manual_seed(seed)
    batch = sample_batch(cfg.layout, n, generator=generator, dtype=cfg.torch_dtype)
    result = analyze(analysed, batch, context.title, explained=explained)
    if not quiet:
        print(headline(result))
    if out_dir is not None:
        out = RunDir(out_dir)
        out.path.mkdir(parents=True, exist_ok=True)
        out.analysis.write_text(result.to_json())
        write_report(model, result, batch, out.report, context.with_run(out))
        if not quiet:
            print(f"\nwrote {out.analysis} and {out.report}")
    return result


def _refuse_in_full(model, n: int, max_memory) -> None:
    """An analysis refused at its floor: refuse it with the whole analysis's estimate instead
    (counted from the atoms, as when it runs) where this machine holds their fit, the model's
    weights and gauge factors; return otherwise (the floor's refusal stands)."""
    from .. import memory
    from ..analysis.budget import analysis_estimate
    from ..analysis.record import check_finite_norm

    cfg = model.cfg
    fit = memory.Estimate("fitting the atoms", {"weights": cfg.n_params * memory.elem(cfg),
                                                "gauge factors": memory.gauge_factor_bytes(cfg)})
    try:
        memory.check(fit, None, model.device)
        check_finite_norm(model)
    except ValueError:
        return
    memory.check(analysis_estimate(model, n), max_memory, model.device)


def _cmd_analyze(args: argparse.Namespace) -> None:
    """Circuit, per-cell templates, closest construction, ablations and the HTML report of a trained
    run (or of a construction); writes ``analysis.json`` and ``report.html`` into the run directory."""
    from pathlib import Path

    from ..maths import constructions
    from ..runs.directory import RunDir
    from ..training.run import Run, unanalysable
    from ..viz.report import ReportContext

    if (args.run_dir is None) == (args.construction is None):
        raise ValueError("give a run directory or --construction NAME (one of them)")
    set_threads(args.threads)
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
        model, metrics = run.weights, run.metrics  # the plain model: no TransformerLens
        source = f"run {run_dir}" + ("" if args.step is None else f" at step {args.step}")
        out_dir = args.out or run_dir
        refused = unanalysable(run.model_cfg)
        if refused is not None:
            behaviour_report(run, refused, out_dir, ReportContext(source, metrics, run.train_cfg),
                             n=args.n, seed=args.seed)
            return
    context = ReportContext(source, metrics,
                            None if args.construction is not None else run.train_cfg)
    analyse_and_report(model, out_dir, context, n=args.n, seed=args.seed,
                       max_memory=args.max_memory)


def behaviour_report(run, why: str, out_dir, context, *, n: int, seed: int,
                     quiet: bool = False) -> None:
    """A run the mechanism analyses cannot read (``training.run.unanalysable``, ``why``): print its
    :func:`_behaviour` on ``n`` samples from ``seed`` (unless ``quiet``) and write it as the
    run's ``report.html`` into ``out_dir`` (``context``: the page's title, metrics and links)."""
    from pathlib import Path

    from ..runs.directory import RunDir, check_writable
    from ..viz.report import write_behaviour_report

    check_writable(Path(out_dir), "write the report elsewhere with --out")
    lines = _behaviour(run, why, n=n, seed=seed)
    path = write_behaviour_report(run.weights, lines, RunDir(out_dir).report, context)
    if not quiet:
        print("\n".join(lines) + f"\nwrote {path}")


def _behaviour(run, why: str, *, n: int, seed: int) -> list[str]:
    """A standard run whose map is not exact: its behaviour on ``n`` fresh samples (MSE against the
    causal floor, rows exact; the same weights under the other mask, the mask ablation) and, in one
    line, why no mechanism is named."""
    from dataclasses import replace

    import torch

    from .. import sample_batch
    from ..labels import excess_text
    from ..maths.floors import causal_floor
    from ..model.standard import StandardTransformer
    from ..task import mse

    model, cfg = run.weights, run.model_cfg
    flipped_dir = "bidirectional" if cfg.causal else "causal"
    flipped = StandardTransformer(replace(cfg, attention_dir=flipped_dir, device="cpu"))
    flipped.load_state_dict(model.state_dict())
    batch = sample_batch(cfg.layout, n, torch.Generator().manual_seed(seed), dtype=cfg.torch_dtype)
    floor = causal_floor(cfg.layout, cfg.readout)
    with torch.no_grad():
        out, other = model(batch.X.to(model.pos_embed.W_pos.device)).cpu(), flipped(batch.X)
    rows = float((out.round() == batch.Y).all(-1).double().mean())
    return [f"run {run.dir}: {cfg.attention_dir}, reads {cfg.readout} rows; on {n} fresh samples MSE "
            f"{excess_text(float(mse(out, batch.Y)), floor if cfg.causal else None)}, rows exact "
            f"{rows:.1%} (causal floor {floor:.4g}); the same weights {flipped_dir}: MSE "
            f"{float(mse(other, batch.Y)):.4g}", f"mechanism analysis refused: {why}"]


def set_threads(threads: int | None) -> None:
    """Torch threads for an analysis: ``threads``; default 1 on the CPU (the model is small; more
    threads only contend on shared cores), torch's own on a GPU."""
    import torch

    from ..errors import check_threads

    if threads is not None:
        check_threads("threads", threads)
    if threads is not None or not torch.cuda.is_available():
        torch.set_num_threads(threads or 1)


def _reusable(run_dir, n: int):
    """The run's ``analysis.json`` when it is complete (it carries what the report draws), for
    ``n`` samples and written after the weights; else None."""
    from ..analysis.record import ModelAnalysis
    from ..runs.directory import RunDir

    path, weights = RunDir(run_dir).analysis, RunDir(run_dir).final
    if not path.is_file() or path.stat().st_mtime < weights.stat().st_mtime:
        return None
    try:
        record = ModelAnalysis.from_json(path.read_text())
    except (ValueError, KeyError, TypeError):
        return None
    complete = record.sample_patterns is not None and record.accuracy is not None
    return record if complete and record.n_samples == n else None


def report_run(run_dir, *, n: int, seed: int, bundle: str | None, threads: int | None,
               max_memory: int | None, links: list[tuple[str, str]] | None = None) -> str:
    """One run's report (a worker's job in ``invperm report DIR``): its ``analysis.json`` is
    reused when :func:`_reusable`, else the run is analysed and the record written once."""
    from dataclasses import replace
    from pathlib import Path

    import torch

    from .. import sample_batch
    from ..runs.directory import RunDir
    from ..training.run import Run, unanalysable
    from ..viz.report import ReportContext, write_report

    set_threads(threads)
    run_dir = Path(run_dir)
    run = Run.load(run_dir)
    context = ReportContext(f"run {run_dir}", run.metrics, run.train_cfg, bundle=bundle,
                            links=tuple(links or ()))
    refused = unanalysable(run.model_cfg)
    if refused is not None:  # its behaviour's page, as analyze writes it
        behaviour_report(run, refused, run_dir, context, n=n, seed=seed, quiet=True)
        return str(run_dir)
    record = _reusable(run_dir, n)
    if record is None:
        analyse_and_report(run.weights, run_dir, context, n=n, seed=seed, quiet=True,
                           max_memory=max_memory)
    else:
        cfg = run.analysis_model.cfg
        generator = torch.Generator(device=run.analysis_model.device).manual_seed(seed)
        batch = sample_batch(cfg.layout, n, generator=generator, dtype=cfg.torch_dtype)
        write_report(run.analysis_model, record, batch, RunDir(run_dir).report,
                     replace(context, title=record.source).with_run(RunDir(run_dir)))
    return str(run_dir)


def _report_directory(root, args: argparse.Namespace) -> None:
    """``invperm report DIR`` on a directory of runs: a report for each run that has none (sharing
    one circuitsvis bundle, ``DIR/circuitsvis.js``, unless ``--inline-bundle``), analysed in
    ``--workers`` processes (default: one per core), then ``DIR/index.html``."""
    import os
    from pathlib import Path

    from ..runs.directory import RunDir
    from ..sweep.run_rows import find_runs, index_title
    from ..training.progress import progress_bar
    from ..viz.index import report_links, write_index
    from ..viz.page import write_bundle

    if args.step is not None or args.out is not None:
        raise ValueError("--step and --out are for one run; DIR is a directory of runs")
    workers = args.workers or os.cpu_count() or 1
    if workers < 1:
        raise ValueError(f"--workers must be an integer >= 1, got {workers}")
    rows = find_runs(root)
    todo = [r for r in rows if not RunDir(r.dir).report.is_file() and RunDir(r.dir).is_finished]
    todo.sort(key=lambda r: -_analysis_cost(r.dir))  # the longest first: the workers end together
    if todo and not args.index_only:
        shared = None if args.inline_bundle else write_bundle(root)
        jobs = [(row.dir, dict(n=args.n, seed=args.seed, threads=args.threads,
                               max_memory=args.max_memory, links=report_links(root, rows, row),
                               bundle=None if shared is None
                               else Path(os.path.relpath(shared, row.dir)).as_posix()))
                for row in todo]
        progress = progress_bar(total=len(jobs), desc="run reports", unit="run")
        try:
            _run_jobs(jobs, min(workers, len(jobs)), progress.update)
        except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM: the reports written are kept
            from ..training.signals import Interrupted

            progress.close()
            raise Interrupted(f"{progress.n} of {len(jobs)} reports written; rerun the same command "
                              f"to write the rest (runs that have a report are skipped)",
                              getattr(err, "signum", signal.SIGINT)) from None
        progress.close()
        rows = find_runs(root)  # the new analyses name mechanisms
    path = write_index(root, rows, index_title(root))
    print(f"wrote {path} ({len(rows)} runs, {len(todo) if not args.index_only else 0} new reports)")


def _run_jobs(jobs: list, workers: int, done) -> None:
    """``report_run(run_dir, **kw)`` for each ``(run_dir, kw)`` of ``jobs`` in order, in ``workers``
    processes: this one (it has loaded torch and matplotlib for the index already: one start-up
    fewer) and ``workers - 1`` spawned ones, each taking the next job when free; ``done()`` after
    each. The first error is raised once the jobs under way have ended; no new job starts after it."""
    import multiprocessing
    import threading
    from concurrent.futures import ProcessPoolExecutor
    from contextlib import nullcontext

    queue, lock, futures = list(reversed(jobs)), threading.Lock(), []

    def take():
        with lock:
            return queue.pop() if queue else None

    def submit(pool) -> None:  # the next job, to a free worker (also from the pool's own thread)
        job = take()
        if job is not None:
            futures.append(future := pool.submit(report_run, job[0], **job[1]))
            future.add_done_callback(lambda f: finished(pool, f))

    def finished(pool, future) -> None:
        if future.exception() is None:
            done()
            submit(pool)
        else:
            queue.clear()

    # spawned, not forked: a forked torch can hang in its thread pools
    spawned = workers - 1
    with (ProcessPoolExecutor(spawned, mp_context=multiprocessing.get_context("spawn"))
          if spawned else nullcontext()) as pool:
        for _ in range(spawned):
            submit(pool)
        try:
            while (job := take()) is not None:
                report_run(job[0], **job[1])
                done()
        except BaseException:
            queue.clear()
            raise
    for future in list(futures):
        future.result()


def _analysis_cost(run_dir) -> int:
    """A run's analysis cost, roughly: its forward's ``T² · ΣD`` (attention over the widths)."""
    from ..runs.directory import RunDir

    cfg, _ = RunDir(run_dir).read_config()
    return cfg.T ** 2 * sum(cfg.widths)


def add_analyze_parser(sub, name: str) -> None:
    from .args import seed, threads

    about = ("circuit, templates, closest construction, ablations and an HTML report of a run or a "
             "construction; on a directory of runs, a report for each and an index page")
    if name == "report":  # the same job under the name a reader looks for, said from that side
        about = ("the HTML report of a run (report.html, read first: headline, training, the "
                 "mechanism, the circuit, ablations, attention) or of a construction, from the same "
                 "analysis as 'invperm analyze', which it writes too (analysis.json); on a directory "
                 "of runs (a sweep, a census), every run's report and index.html linking them")
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
    analyze.add_argument("--n", type=int, default=512,
                         help="samples the analysis is measured on (verdicts, ablations, "
                              "patterns); 4096 resolves the rule's thresholds as the census does")
    analyze.add_argument("--seed", type=seed, default=0, help="seeds the analysis batch")
    analyze.add_argument("--out", help="directory for analysis.json and report.html "
                                        "(default: the run directory)")
    analyze.add_argument("--threads", type=threads, help=THREADS_HELP)
    analyze.add_argument("--workers", type=int, help="for a directory of runs: analyses run in this "
                                                      "many processes (default: one per core)")
    analyze.add_argument("--max-memory", type=size, metavar="SIZE", help=MAX_MEMORY_HELP)
    analyze.add_argument("--index-only", action="store_true",
                         help="for a directory of runs: only the index page, no missing run reports")
    analyze.add_argument("--inline-bundle", action="store_true",
                         help="for a directory of runs: inline circuitsvis in every report instead "
                              "of sharing DIR/circuitsvis.js")
    analyze.set_defaults(func=_cmd_analyze)
