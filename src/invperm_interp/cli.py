"""The ``invperm`` command line. Each subcommand is one function ``_cmd_NAME(args)``.

Errors a user can cause (``ValueError``, missing files) print one readable line and exit 2.
"""

from __future__ import annotations

import argparse
import sys


def _cmd_demo(args: argparse.Namespace) -> None:
    """The main job: train the note's two models (bidirectional and causal, reading the P rows),
    analyse each, and write an HTML report per run under ``--out``."""
    from pathlib import Path

    from . import Layout, ModelConfig
    from .config import TrainConfig
    from .train import train_or_reuse

    out = Path(args.out)
    finals = {}
    for attention in ("bidirectional", "causal"):
        run_dir = out / attention
        print(f"== training the {attention} model ({args.steps} steps, d={args.d}) -> {run_dir}")
        model_cfg = ModelConfig(Layout.plain(args.d), attention_dir=attention, readout="P")
        train_cfg = TrainConfig(steps=args.steps, out_dir=str(run_dir), threads=args.threads,
                                seed=args.seed)
        # a finished demo run of this config is reused
        run = train_or_reuse(model_cfg, train_cfg, max_memory=args.max_memory)
        finals[attention] = run.final_metrics
        _analyse_and_report(run.model, f"run {run_dir}", run_dir, run.metrics, n=512, seed=0,
                            train_cfg=run.train_cfg, max_memory=args.max_memory)
    floor = finals["causal"]["causal_floor"]
    print(f"\n== the note's claim: bidirectional MSE {finals['bidirectional']['mse']:.3g}, causal MSE "
          f"{finals['causal']['mse']:.3g}, exact causal floor {floor:.4g} (0.5 everywhere: "
          f"{0.25 * args.d:.4g})")
    from .viz.index import write_index

    print(f"open {write_index(out)}, or {out / 'bidirectional' / 'report.html'} and "
          f"{out / 'causal' / 'report.html'}")


def _analyse_and_report(model, source: str, out_dir, metrics=None, *, n: int, seed: int,
                        train_cfg=None, bundle: str | None = None, quiet: bool = False,
                        max_memory: int | None = None):
    """Analyse ``model`` on ``n`` fresh samples (``analysis.analyze``), print the headline, write
    ``analysis.json`` (the ``ModelAnalysis`` record) and ``report.html`` into ``out_dir`` (nothing
    written when ``out_dir`` is None); returns the record. ``bundle``: the relative URL of a shared
    circuitsvis bundle (default: inlined)."""
    from pathlib import Path

    import torch

    from . import memory, sample_batch
    from .analysis.record import analyze, headline
    from .viz.report import write_report

    cfg = model.cfg
    memory.check(memory.analysis_estimate(cfg, n), max_memory, model.device)
    generator = torch.Generator(device=model.device).manual_seed(seed)
    batch = sample_batch(cfg.layout, n, generator=generator, dtype=cfg.torch_dtype)
    result = analyze(model, batch, source)
    if not quiet:
        print(headline(result))
    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "analysis.json").write_text(result.to_json())
        write_report(model, result, batch, out_dir / "report.html", metrics, title=source,
                     train_cfg=train_cfg, bundle=bundle)
        if not quiet:
            print(f"\nwrote {out_dir / 'analysis.json'} and {out_dir / 'report.html'}")
    return result


def _cmd_construct(args: argparse.Namespace) -> None:
    """An analytic construction's nonzero cells and its error against ``Y`` (or ``--list``)."""
    from . import constructions

    if args.list:
        width = max(map(len, constructions.names()))
        for name in constructions.names():
            spec = constructions.REGISTRY[name]
            print(f"{name:{width}s} {'works ' if spec.works else 'FAILS '} {spec.description}")
        return
    if args.name is None:
        raise ValueError(f"give a construction name (one of {constructions.names()}) or --list")
    spec = constructions.get(args.name)
    model = constructions.build(args.name, args.d, args.beta, max_memory=args.max_memory)
    beta = constructions.DEFAULT_BETA if args.beta is None else args.beta
    check = constructions.verify(model, n=args.n, seed=args.seed, max_memory=args.max_memory)
    print(f"{spec.name}: {spec.description}")
    print(f"{spec.attention_dir} attention on {model.cfg.layout}; W_U = I on {spec.read_block} "
          f"of the {spec.readout} rows")
    for layer, query, key, template in spec.cells:
        print(f"  layer {layer + 1} (blocks.{layer}): {template:>2s} at ({query}, {key}) x beta={beta:g}")
    print(f"verification on {check.n} samples: max |error| {check.max_error:.3g}, "
          f"MSE {check.mse:.3g}")


_MODEL_FLAGS = ("layout", "n_scratch", "attention", "readout", "layers", "heads", "d", "dtype")
_TRAIN_FLAGS = ("steps", "batch_size", "recipe", "lr", "optimizer", "schedule", "schedule_steps",
                "seed", "device", "threads", "eval_every", "eval_size", "checkpoint_every",
                "stop_at_mse", "stop_at_floor")


_DEFAULT_READOUT = {"plain": "P", "scratch": "P", "code": "pad0"}  # code: the note's code's rows


def _layout(kind: str, d: int, n_scratch: int | None):
    """``--layout``: ``plain`` ``[P; Y_P]``, ``scratch`` ``[P; Y_P; S]``, ``code`` the note's code's
    ``[0; P; Y_P; 0]`` (segments ``pad0, P, Y, pad1``; its code reads out ``pad0``)."""
    from . import Layout

    if n_scratch is not None and kind != "scratch":
        raise ValueError("--n-scratch sets the scratch rows of --layout scratch; add "
                         "--layout scratch or drop --n-scratch")
    if kind == "scratch":
        return Layout.scratch(d, n_scratch)
    return Layout.of(d, "0", "P", "Y", "0") if kind == "code" else Layout.plain(d)


def _cmd_train(args: argparse.Namespace) -> None:
    """Train a model, or continue one (``--resume DIR``); everything lands in the run directory."""
    import json
    from pathlib import Path

    from . import ModelConfig
    from .config import TrainConfig
    from .train import resume, train

    given = {k: v for k, v in vars(args).items() if k in _MODEL_FLAGS + _TRAIN_FLAGS and v is not None}
    progress = not args.no_progress
    if args.resume is not None:
        extra = sorted(set(given) - {"steps", "threads"})
        extra += [f"--{k}" for k in ("config", "out") if getattr(args, k) is not None]
        if extra or args.force:
            raise ValueError("--resume DIR takes only --steps and --threads; the rest comes from "
                             f"DIR/config.json (got {extra or ['--force']})")
        run = resume(args.resume, steps=args.steps, threads=args.threads, progress=progress,
                     max_memory=args.max_memory)
    else:
        if args.config is not None:
            if set(given) & set(_MODEL_FLAGS):
                raise ValueError("give the model either with --config or with flags, not both")
            try:
                data = json.loads(Path(args.config).read_text())
            except json.JSONDecodeError as err:
                raise ValueError(f"--config {args.config} is not JSON: {err}") from None
            if not isinstance(data, dict) or "model" not in data:
                raise ValueError(f"--config must be a JSON object with 'model' (and 'train'), "
                                 f"like a run's config.json: {args.config}")
            if not isinstance(data.get("train") or {}, dict):
                raise ValueError(f"--config {args.config}: 'train' must be a JSON object")
            model_cfg, base = ModelConfig.from_dict(data["model"]), dict(data.get("train") or {})
        else:
            kind = given.get("layout", "plain")
            layout = _layout(kind, given.get("d", 10), given.get("n_scratch"))
            model_cfg = ModelConfig(layout, n_layers=given.get("layers", 2),
                                    n_heads=given.get("heads", 1),
                                    attention_dir=given.get("attention", "causal"),
                                    readout=given.get("readout", _DEFAULT_READOUT[kind]),
                                    dtype=given.get("dtype", "float32"))
            base = {}
        base.update({k: v for k, v in given.items() if k in _TRAIN_FLAGS})
        if args.out is not None:
            base["out_dir"] = args.out
        if base.get("out_dir") is None:
            raise ValueError("--out DIR is required: the run directory for metrics and checkpoints")
        run = train(model_cfg, TrainConfig.from_dict(base), progress=progress,
                    max_memory=args.max_memory, force=args.force)
    m = run.final_metrics
    print(f"{run.dir}: step {run.step}, MSE {m['mse']:.4g} ({m['attention_dir']}; the causal floor "
          f"of this layout and read-out is {m['causal_floor']:.4g}), rows exact {m['row_acc']:.1%}"
          + (f"; stopped early ({m['stopped']})" if m.get("stopped") else ""))


def _cmd_analyze(args: argparse.Namespace) -> None:
    """Circuit, per-cell templates, closest construction, ablations and the HTML report of a trained
    run (or of a construction); writes ``analysis.json`` and ``report.html`` into the run directory."""
    from pathlib import Path

    from . import constructions
    from .runs import Run

    if (args.run_dir is None) == (args.construction is None):
        raise ValueError("give a run directory or --construction NAME (one of them)")
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    metrics = None
    if args.construction is not None:
        model = constructions.build(args.construction, args.d, args.beta, max_memory=args.max_memory)
        source, out_dir = f"construction {args.construction}", args.out
    else:
        run_dir = Path(args.run_dir)
        if not run_dir.is_dir():
            raise NotADirectoryError(f"run directory {run_dir} does not exist")
        if not (run_dir / "config.json").is_file():  # a sweep or census: its index page
            _report_directory(run_dir, args)
            return
        if args.index_only or args.inline_bundle:
            raise ValueError("--index-only and --inline-bundle are for a directory of runs; "
                             f"{run_dir} is one run")
        run = Run.load(run_dir, step=args.step)
        model, metrics = run.model, run.metrics
        source = f"run {run_dir}" + ("" if args.step is None else f" at step {args.step}")
        out_dir = args.out or run_dir
    _analyse_and_report(model, source, out_dir, metrics, n=args.n, seed=args.seed,
                        train_cfg=None if args.construction is not None else run.train_cfg,
                        max_memory=args.max_memory)


def _report_directory(root, args: argparse.Namespace) -> None:
    """``invperm report DIR`` on a directory of runs: a report for each run that has none (sharing
    one circuitsvis bundle, ``DIR/circuitsvis.js``, unless ``--inline-bundle``), then
    ``DIR/index.html``."""
    import os
    from pathlib import Path

    from tqdm import tqdm

    from .runs import Run
    from .viz.attention import write_bundle
    from .viz.index import find_runs, write_index

    if args.step is not None or args.out is not None:
        raise ValueError("--step and --out are for one run; DIR is a directory of runs")
    rows = find_runs(root)
    todo = [r.dir for r in rows if not (r.dir / "report.html").is_file()
            and (r.dir / "final.safetensors").is_file()]
    if todo and not args.index_only:
        shared = None if args.inline_bundle else write_bundle(root)
        for run_dir in tqdm(todo, desc="run reports", unit="run"):
            run = Run.load(run_dir)
            bundle = None if shared is None else Path(os.path.relpath(shared, run_dir)).as_posix()
            _analyse_and_report(run.model, f"run {run_dir}", run_dir, run.metrics, n=args.n,
                                seed=args.seed, train_cfg=run.train_cfg, bundle=bundle, quiet=True,
                                max_memory=args.max_memory)
        rows = find_runs(root)  # the new analyses name mechanisms
    path = write_index(root, rows)
    print(f"wrote {path} ({len(rows)} runs, {len(todo) if not args.index_only else 0} new reports)")


_MAX_MEMORY_HELP = "memory limit for the size check, e.g. 8G (default: what the machine has left)"


def _size(text: str) -> int:
    """``--max-memory``: ``8G``, ``500M``, ``2e9`` → bytes (argparse reports a bad one)."""
    from .memory import parse_size

    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="invperm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="the main job: train the note's bidirectional and causal "
                                       "models, analyse them, write HTML reports")
    demo.add_argument("--d", type=int, default=10)
    demo.add_argument("--steps", type=int, default=1500)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--threads", type=int, default=None, help="torch threads (default 1 on the CPU)")
    demo.add_argument("--out", default="runs/demo", help="where the runs and reports go")
    demo.add_argument("--max-memory", type=_size, metavar="SIZE",
                      help=_MAX_MEMORY_HELP)
    demo.set_defaults(func=_cmd_demo)

    construct = sub.add_parser("construct", help="an analytic construction's cells and its error")
    construct.add_argument("name", nargs="?", help="construction name (see --list)")
    construct.add_argument("--list", action="store_true", help="list constructions and exit")
    construct.add_argument("--d", type=int, default=10)
    construct.add_argument("--beta", type=float, default=None, help="cell scale (default 100)")
    construct.add_argument("--n", type=int, default=256, help="samples for the verification")
    construct.add_argument("--seed", type=int, default=0)
    construct.add_argument("--max-memory", type=_size, metavar="SIZE",
                           help=_MAX_MEMORY_HELP)
    construct.set_defaults(func=_cmd_construct)

    tr = sub.add_parser("train", help="train a model; config, metrics and checkpoints under --out")
    tr.add_argument("--layout", choices=["plain", "scratch", "code"],
                    help="[P; Y_P] (default), [P; Y_P; S], or the note's code's [0; P; Y_P; 0]")
    tr.add_argument("--n-scratch", type=int, help="scratch rows (default d)")
    tr.add_argument("--attention", choices=["causal", "bidirectional"], help="default causal")
    tr.add_argument("--readout", help="segment read out: P, Y, S, pad0, pad1 (default P; "
                                      "pad0 for --layout code)")
    tr.add_argument("--layers", type=int, help="default 2")
    tr.add_argument("--heads", type=int, help="heads per layer (default 1)")
    tr.add_argument("--d", type=int, help="task size (default 10)")
    tr.add_argument("--dtype", choices=["float32", "float64"])
    tr.add_argument("--steps", type=int, help="with --resume: extend the run to this many")
    tr.add_argument("--batch-size", type=int)
    tr.add_argument("--recipe", choices=["adam", "paper", "fast"],
                    help="adam (default), fast (adam at the batch size that solves soonest on a CPU) "
                         "or the note's")
    tr.add_argument("--lr", type=float)
    tr.add_argument("--optimizer", choices=["adam", "sgd"])
    tr.add_argument("--schedule", choices=["constant", "cosine"])
    tr.add_argument("--schedule-steps", type=int, help="cosine horizon (paper: 65536, the note's)")
    tr.add_argument("--seed", type=int)
    tr.add_argument("--device", help="auto (default), cpu, cuda, cuda:N")
    tr.add_argument("--threads", type=int, help="torch threads (default 1 on the CPU: faster on "
                                                "shared cores; run models side by side instead)")
    tr.add_argument("--stop-at-mse", type=float, help="stop at the first evaluation below this MSE")
    tr.add_argument("--stop-at-floor", type=float, metavar="TOL",
                    help="causal models: stop once 3 evaluations lie within relative TOL of the "
                         "causal floor")
    tr.add_argument("--eval-every", type=int)
    tr.add_argument("--eval-size", type=int)
    tr.add_argument("--checkpoint-every", type=int)
    tr.add_argument("--out", help="run directory (new or empty)")
    tr.add_argument("--force", action="store_true",
                    help="write the run into an --out that holds other files (never over a run)")
    tr.add_argument("--config", help="JSON with 'model' and 'train', e.g. a run's config.json")
    tr.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint")
    tr.add_argument("--no-progress", action="store_true", help="no progress bar")
    tr.add_argument("--max-memory", type=_size, metavar="SIZE",
                    help=_MAX_MEMORY_HELP)
    tr.set_defaults(func=_cmd_train)

    for name in ("analyze", "report"):  # the same job; "report" is the name users look for
        _add_analyze_parser(sub, name)
    from .cli_sweep import add_sweep_parsers

    add_sweep_parsers(sub)
    return parser


def _add_analyze_parser(sub, name: str) -> None:
    analyze = sub.add_parser(name, help="circuit, templates, closest construction, ablations and "
                                        "an HTML report of a run or a construction")
    analyze.add_argument("run_dir", nargs="?", help="a training run directory (gets analysis.json), "
                                                     "or a directory of runs (gets index.html)")
    analyze.add_argument("--step", type=int, default=None, help="a checkpoint step (default: final)")
    analyze.add_argument("--construction", help="analyze a construction instead (see construct --list)")
    analyze.add_argument("--d", type=int, default=10, help="task size for --construction")
    analyze.add_argument("--beta", type=float, default=None, help="cell scale for --construction")
    analyze.add_argument("--n", type=int, default=512, help="samples for patterns and ablations")
    analyze.add_argument("--seed", type=int, default=0)
    analyze.add_argument("--out", help="directory for analysis.json and report.html "
                                        "(default: the run directory)")
    analyze.add_argument("--threads", type=int, help="torch threads; on busy shared cores try 1")
    analyze.add_argument("--max-memory", type=_size, metavar="SIZE", help=_MAX_MEMORY_HELP)
    analyze.add_argument("--index-only", action="store_true",
                         help="for a directory of runs: only the index page, no missing run reports")
    analyze.add_argument("--inline-bundle", action="store_true",
                         help="for a directory of runs: inline circuitsvis in every report instead "
                              "of sharing DIR/circuitsvis.js")
    analyze.set_defaults(func=_cmd_analyze)


def _out_of_memory(err: BaseException) -> bool:
    """An allocation the size check let through failed (another process took the memory)."""
    text = str(err)
    return isinstance(err, MemoryError) or (
        isinstance(err, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text))


def main(argv: list[str] | None = None) -> int:
    import warnings

    args = build_parser().parse_args(argv)

    def one_line(message, category, filename, lineno, file=None, line=None):
        print(f"invperm {args.command}: warning: {message}", file=sys.stderr)

    try:
        with warnings.catch_warnings():
            warnings.showwarning = one_line
            args.func(args)
    except (ValueError, OSError) as err:  # OSError: missing or unreadable files, a full disk
        print(f"invperm {args.command}: error: {err}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as err:
        if not _out_of_memory(err):
            raise
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"invperm {args.command}: error: out of memory ({first}); lower the sizes or the "
              f"number of samples, or free memory", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # SIGINT / SIGTERM: train checkpoints and says how to resume
        code = getattr(err, "exit_code", 130)
        how = "interrupted" if code == 130 else f"terminated by {err.signal_name}"
        print(f"invperm {args.command}: {how}{f': {err}' if str(err) else ''}", file=sys.stderr)
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
