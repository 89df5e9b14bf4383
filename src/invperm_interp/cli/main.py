"""The ``invperm`` command line. Each subcommand is one function ``_cmd_NAME(args)`` (``analyze`` in
``cli/analyze.py``, ``sweep`` in ``cli/sweep.py``); every one's help shows its defaults and examples.

Errors a user can cause (``ValueError``, missing files) print one readable line and exit 2.
"""

from __future__ import annotations

import argparse
import sys

from ..architecture import ARCHS
from .address_space import check_address_space
from .analyze import add_analyze_parser, analyse_and_report
from .args import MAX_MEMORY_HELP, THREADS_HELP, HelpFormatter, add_command, examples, seed, size, threads


def _cmd_demo(args: argparse.Namespace) -> None:
    """The main job: train the note's two models (bidirectional and causal, reading the P rows),
    analyse each, and write an HTML report per run under ``--out`` (sharing one circuitsvis bundle)
    and an index page stating the result."""
    from pathlib import Path

    from .. import Layout, ModelConfig
    from ..config import TrainConfig
    from ..labels import excess_text
    from ..runs.directory import RunDir
    from ..sweep.run_rows import find_runs
    from ..training.single import train_or_reuse
    from ..viz.index import report_links, write_index
    from ..viz.page import write_bundle
    from ..viz.report import ReportContext

    out = Path(args.out)
    runs = {}
    for attention in ("bidirectional", "causal"):
        run_dir = out / attention
        print(f"== training the {attention} model ({args.steps} steps, d={args.d}) -> {run_dir}")
        model_cfg = ModelConfig(Layout.plain(args.d), attention_dir=attention, readout="P")
        train_cfg = TrainConfig(steps=args.steps, out_dir=str(run_dir), threads=args.threads,
                                seed=args.seed)
        # a finished demo run of this config is reused
        runs[attention] = train_or_reuse(model_cfg, train_cfg, max_memory=args.max_memory)
    write_bundle(out)
    rows = {r.dir: r for r in find_runs(out)}
    for attention, run in runs.items():  # both trained, so each report links to its twin
        run_dir = out / attention
        print(f"\n== analysing the {attention} model")
        context = ReportContext(f"run {run_dir}", run.metrics, run.train_cfg,
                                bundle="../circuitsvis.js",
                                links=tuple(report_links(out, list(rows.values()), rows[run_dir])))
        analyse_and_report(run.weights, run_dir, context, n=512, seed=0, max_memory=args.max_memory)
    bi, ca = runs["bidirectional"].final_metrics, runs["causal"].final_metrics
    print(f"\n== the note's claim, on each run's fixed eval batch at its last step: the "
          f"bidirectional model learns (MSE {bi.mse:.3g}, rows exact {bi.row_acc:.1%}); the "
          f"causal one sits on its floor (MSE {excess_text(ca.mse, ca.causal_floor)}; 0.5 "
          f"everywhere scores {0.25 * args.d:.4g})")
    index = write_index(out, find_runs(out), title=f"invperm demo: the note's two models at d = {args.d}")
    print(f"open {index}, or {RunDir(out / 'bidirectional').report} and "
          f"{RunDir(out / 'causal').report}")


def _cmd_construct(args: argparse.Namespace) -> None:
    """An analytic construction's nonzero cells and its error against ``Y`` (or ``--list``)."""
    from ..maths import constructions

    if args.list:
        width = max(map(len, constructions.names()))
        for name in constructions.names():
            spec = constructions.REGISTRY[name]
            print(f"{name:{width}s} {'works ' if spec.works else 'FAILS '} {spec.description}")
        return
    if args.name is None:
        raise ValueError(f"give a construction name (one of {constructions.names()}) or --list")
    spec = constructions.get(args.name)
    model = constructions.build(args.name, args.d, args.beta, max_memory=args.max_memory,
                                hooked=False)  # a check only: no hooks, no TransformerLens
    beta = constructions.default_beta(args.name) if args.beta is None else args.beta
    check = constructions.verify(model, n=args.n, seed=args.seed, max_memory=args.max_memory)
    print(f"{spec.name}: {spec.description}")
    print(f"{spec.attention_dir} attention on {model.cfg.layout}; W_U = I on {spec.read_block} "
          f"of the {spec.readout} rows")
    several = max(spec.heads) > 1
    for layer, head, query, key, template in spec.cells:
        where = f"layer {layer + 1} head {head} (blocks.{layer}.attn.A[{head}])" if several else (
            f"layer {layer + 1} (blocks.{layer})")
        print(f"  {where}: {template:>2s} at ({query}, {key}) x beta={beta:g}")
    print(f"verification on {check.n} samples: max |error| {check.max_error:.3g}, "
          f"MSE {check.mse:.3g}")


_MODEL_FLAGS = ("layout", "n_scratch", "attention", "readout", "layers", "heads", "d", "dtype",
                "arch", "d_model", "d_head", "layernorm", "d_mlp", "init_scale")
_TRAIN_FLAGS = ("steps", "batch_size", "recipe", "lr", "optimizer", "schedule", "schedule_steps",
                "seed", "device", "threads", "eval_every", "eval_size", "checkpoint_every",
                "checkpoint_dense_every", "stop_at_mse", "stop_at_floor")


_ARCH_FLAGS = ("arch", "d_model", "d_head", "layernorm", "d_mlp", "init_scale")


def _cmd_train(args: argparse.Namespace) -> None:
    """Train a model, or continue one (``--resume DIR``); everything lands in the run directory."""
    import json
    from pathlib import Path

    from .. import ModelConfig
    from ..config import TrainConfig
    from ..training.single import resume, train

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
            from ..task import DEFAULT_READOUT, Layout

            kind = given.get("layout", "plain")
            if given.get("n_scratch") is not None and kind != "scratch":
                raise ValueError("--n-scratch sets the scratch rows of --layout scratch; add "
                                 "--layout scratch or drop --n-scratch")
            layout = Layout.named(kind, given.get("d", 10), given.get("n_scratch"))
            model_cfg = ModelConfig(layout, n_layers=given.get("layers", 2),
                                    n_heads=given.get("heads", 1),
                                    attention_dir=given.get("attention", "causal"),
                                    readout=given.get("readout", DEFAULT_READOUT[kind]),
                                    dtype=given.get("dtype", "float32"),
                                    **{k: given[k] for k in _ARCH_FLAGS if k in given})
            base = {}
        base.update({k: v for k, v in given.items() if k in _TRAIN_FLAGS})
        if args.out is not None:
            base["out_dir"] = args.out
        if base.get("out_dir") is None:
            raise ValueError("--out DIR is required: the run directory for metrics and checkpoints")
        run = train(model_cfg, TrainConfig.from_dict(base), progress=progress,
                    max_memory=args.max_memory, force=args.force)
    from ..labels import excess_text

    m, attention = run.final_metrics, run.model_cfg.attention_dir
    floor = m.causal_floor if run.model_cfg.causal else None
    print(f"{run.dir}: step {run.step}, MSE on the eval batch {excess_text(m.mse, floor)} "
          f"({attention}; the causal floor of this layout and read-out is "
          f"{m.causal_floor:.4g}), rows exact {m.row_acc:.1%}"
          + (f"; stopped early ({m.stopped})" if m.stopped else ""))


DESCRIPTION = """\
Train small attention-only ("disentangled") transformers on the inverse-permutation task of the
note "The Impossibility of Inverse Permutation Learning in Transformer Models" (given a permutation
matrix P and Y_P, output Y), find the circuit each model learned, and write HTML reports. A
bidirectional model learns the task; a causally masked one reading the P rows cannot beat the exact
causal floor (Lemma 1). Start with `invperm demo`: it trains both at d = 10, analyses them and
writes a report for each and an index page under runs/demo (open runs/demo/index.html)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="invperm", description=DESCRIPTION, formatter_class=HelpFormatter,
        epilog=examples("invperm demo", "invperm train --attention bidirectional --out runs/bi",
                        "invperm report runs/bi", "invperm <command> --help   (each command's options)"))
    sub = parser.add_subparsers(dest="command", required=True, metavar="<command>")

    def command(name: str, about: str, *example: str) -> argparse.ArgumentParser:
        return add_command(sub, name, about, *example)

    demo = command("demo", "the main job: train the note's bidirectional and causal models, analyse "
                           "them, write HTML reports and an index",
                   "invperm demo", "invperm demo --d 6 --steps 800 --out runs/demo6")
    demo.add_argument("--d", type=int, default=10, help="task size (P is d x d)")
    demo.add_argument("--steps", type=int, default=1500, help="training steps of each model")
    demo.add_argument("--seed", type=seed, default=0, help="seeds the init, data and eval batch")
    demo.add_argument("--threads", type=threads, default=None, help=THREADS_HELP)
    demo.add_argument("--out", default="runs/demo", help="where the runs and reports go")
    demo.add_argument("--max-memory", type=size, metavar="SIZE", help=MAX_MEMORY_HELP)
    demo.set_defaults(func=_cmd_demo)

    construct = command("construct", "an analytic construction's cells and its error",
                        "invperm construct --list", "invperm construct theorem3 --d 6")
    construct.add_argument("name", nargs="?", help="construction name (see --list)")
    construct.add_argument("--list", action="store_true", help="list constructions and exit")
    construct.add_argument("--d", type=int, default=10, help="task size")
    construct.add_argument("--beta", type=float, default=None,
                           help="cell scale (default: the larger of 100 and its exact beta)")
    construct.add_argument("--n", type=int, default=256, help="samples for the verification")
    construct.add_argument("--seed", type=seed, default=0, help="seeds the verification samples")
    construct.add_argument("--max-memory", type=size, metavar="SIZE", help=MAX_MEMORY_HELP)
    construct.set_defaults(func=_cmd_construct)

    tr = command("train", "train a model; config, metrics and checkpoints under --out",
                 "invperm train --attention bidirectional --out runs/bi",
                 "invperm train --layout scratch --out runs/scratch   (causal, reads the S rows)",
                 "invperm train --resume runs/bi --steps 5000")
    tr.add_argument("--layout", choices=["plain", "scratch", "code"],
                    help="[P; Y_P] (default plain), [P; Y_P; S], or the note's code's [0; P; Y_P; 0]")
    tr.add_argument("--n-scratch", type=int, help="scratch rows of --layout scratch (default d)")
    tr.add_argument("--attention", choices=["causal", "bidirectional"], help="default causal")
    tr.add_argument("--readout", help="segment read out: P, Y, S, pad0, pad1 (default P; S for "
                                      "--layout scratch; pad0 for --layout code)")
    tr.add_argument("--layers", type=int, help="default 2")
    tr.add_argument("--heads", type=int, help="heads per layer (default 1)")
    tr.add_argument("--d", type=int, help="task size (default 10)")
    tr.add_argument("--dtype", choices=["float32", "float64"], help="default float32")
    tr.add_argument("--arch", choices=ARCHS,
                    help="the note's disentangled model (default) or a standard transformer "
                         "(docs/standard.md)")
    tr.add_argument("--d-model", type=int, help="standard: residual width (default 64)")
    tr.add_argument("--d-head", type=int, help="standard: head width (default d_model // heads)")
    tr.add_argument("--layernorm", action="store_const", const=True,
                    help="standard: pre-LayerNorm (default: none)")
    tr.add_argument("--d-mlp", type=int, help="standard: an MLP of this width in every layer "
                                              "(default: attention-only)")
    tr.add_argument("--init-scale", type=float, help="std of the normal init (default 0.01; "
                                                     "standard 0.1)")
    tr.add_argument("--steps", type=int, help="training steps (default 3000); with --resume: "
                                              "extend the run to this many")
    tr.add_argument("--batch-size", type=int, help="default: the recipe's (1024; fast: the batch "
                                                   "that solves soonest on a CPU)")
    tr.add_argument("--recipe", choices=["adam", "paper", "fast"],
                    help="adam (default), fast (adam at the batch size that solves soonest on a CPU) "
                         "or paper (the note's: SGD lr 1.0, cosine over 65536 steps, zero init)")
    tr.add_argument("--lr", type=float, help="default: the recipe's (adam 1e-2, paper 1.0)")
    tr.add_argument("--optimizer", choices=["adam", "sgd"], help="default: the recipe's")
    tr.add_argument("--schedule", choices=["constant", "cosine"], help="default: the recipe's")
    tr.add_argument("--schedule-steps", type=int, help="cosine horizon (default: 65536 for paper, "
                                                       "the note's; else --steps)")
    tr.add_argument("--seed", type=seed, help="seeds the init, data and eval batch (default 0)")
    tr.add_argument("--device", help="auto (default: CUDA when available), cpu, cuda, cuda:N")
    tr.add_argument("--threads", type=threads, help=THREADS_HELP)
    tr.add_argument("--stop-at-mse", type=float, help="stop at the first evaluation below this MSE "
                                                      "(default: off)")
    tr.add_argument("--stop-at-floor", type=float, metavar="TOL",
                    help="causal models: stop once 3 evaluations lie within relative TOL of the "
                         "causal floor (default: off)")
    tr.add_argument("--eval-every", type=int, help="steps between evaluations (default 100)")
    tr.add_argument("--eval-size", type=int, help="samples of the fixed eval batch (default 4096)")
    tr.add_argument("--checkpoint-every", type=int, help="steps between checkpoints (default 1000)")
    tr.add_argument("--checkpoint-dense-every", type=int, metavar="N",
                    help="also checkpoint every N steps until an evaluation has MSE < 1e-3 (to "
                         "time how the circuit forms: invperm timeline; default: off)")
    tr.add_argument("--out", help="run directory (new or empty; required unless --resume)")
    tr.add_argument("--force", action="store_true",
                    help="write the run into an --out that holds other files (never over a run)")
    tr.add_argument("--config", help="JSON with 'model' and 'train', e.g. a run's config.json")
    tr.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint")
    tr.add_argument("--no-progress", action="store_true", help="no progress bar")
    tr.add_argument("--max-memory", type=size, metavar="SIZE", help=MAX_MEMORY_HELP)
    tr.set_defaults(func=_cmd_train)

    for name in ("analyze", "report"):  # the same job; "report" is the name users look for
        add_analyze_parser(sub, name)
    from .discover import add_discover_parser
    from .sweep import add_sweep_parsers

    add_sweep_parsers(sub)
    add_discover_parser(sub)
    from .timeline import add_timeline_parser

    add_timeline_parser(sub)
    from .import_model import add_import_parser

    add_import_parser(sub)
    return parser


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
            check_address_space()  # before torch, whose import aborts below the floor
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

