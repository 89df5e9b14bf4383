"""The ``invperm`` command line. Each subcommand is one function ``_cmd_NAME(args)``.

Errors a user can cause (``ValueError``, missing files) print one readable line and exit 2.
"""

from __future__ import annotations

import argparse
import sys

import torch


def _cmd_demo(args: argparse.Namespace) -> None:
    """A forward pass of a small model with its named blocks and hook names."""
    from . import HookedDisentangledTransformer, Layout, ModelConfig, sample_batch

    cfg = ModelConfig(Layout.plain(args.d), n_layers=2, attention_dir="bidirectional")
    model = HookedDisentangledTransformer(cfg, seed=0)
    batch = sample_batch(cfg.layout, 4, generator=torch.Generator().manual_seed(0))
    out, cache = model.run_with_cache(batch.X)
    print(model)
    for layer in range(cfg.n_layers + 1):
        print(f"h^{layer} blocks ({model.stream.width(layer)} features):",
              ", ".join(model.stream.labels(layer)))
    print("hooks:")
    for name in model.hook_dict:
        print(f"  {name:32s} {tuple(cache[name].shape)}")
    mse = ((out - batch.Y) ** 2).sum(-1).mean().item()
    print(f"output {tuple(out.shape)}; MSE of the untrained model: {mse:.4f} (0.5 everywhere: "
          f"{0.25 * args.d:.2f})")


def _cmd_construct(args: argparse.Namespace) -> None:
    """An analytic construction's nonzero cells and its error against ``Y`` (or ``--list``)."""
    from . import constructions

    if args.list:
        for name in constructions.names():
            spec = constructions.REGISTRY[name]
            print(f"{name:22s} {'works ' if spec.works else 'FAILS '} {spec.description}")
        return
    if args.name is None:
        raise ValueError(f"give a construction name (one of {constructions.names()}) or --list")
    spec = constructions.get(args.name)
    model = constructions.build(args.name, args.d, args.beta)
    beta = constructions.DEFAULT_BETA if args.beta is None else args.beta
    print(f"{spec.name}: {spec.description}")
    print(f"{spec.attention_dir} attention on {model.cfg.layout}; W_U = I on {spec.read_block} "
          f"of the {spec.readout} rows")
    for layer, query, key, template in spec.cells:
        print(f"  layer {layer + 1} (blocks.{layer}): {template:>2s} at ({query}, {key}) x beta={beta:g}")
    check = constructions.verify(model, n=args.n, seed=args.seed)
    print(f"verification on {check.n} samples: max |error| {check.max_error:.3g}, "
          f"MSE {check.mse:.3g}")


_MODEL_FLAGS = ("layout", "n_scratch", "attention", "readout", "layers", "heads", "d", "dtype")
_TRAIN_FLAGS = ("steps", "batch_size", "recipe", "lr", "optimizer", "schedule", "schedule_steps",
                "seed", "device", "threads", "eval_every", "eval_size", "checkpoint_every")


def _cmd_train(args: argparse.Namespace) -> None:
    """Train a model, or continue one (``--resume DIR``); everything lands in the run directory."""
    import json
    from pathlib import Path

    from . import Layout, ModelConfig
    from .config import TrainConfig
    from .train import resume, train

    given = {k: v for k, v in vars(args).items() if k in _MODEL_FLAGS + _TRAIN_FLAGS and v is not None}
    progress = not args.no_progress
    if args.resume is not None:
        extra = sorted(set(given) - {"steps", "threads"})
        if extra or args.config or args.out:
            raise ValueError("--resume DIR takes only --steps and --threads; the rest comes from "
                             f"DIR/config.json (got {extra or ['--config/--out']})")
        run = resume(args.resume, steps=args.steps, threads=args.threads, progress=progress)
    else:
        if args.config is not None:
            if set(given) & set(_MODEL_FLAGS):
                raise ValueError("give the model either with --config or with flags, not both")
            data = json.loads(Path(args.config).read_text())
            if not isinstance(data, dict) or "model" not in data:
                raise ValueError(f"--config must be a JSON object with 'model' (and 'train'), "
                                 f"like a run's config.json: {args.config}")
            model_cfg, base = ModelConfig.from_dict(data["model"]), dict(data.get("train") or {})
        else:
            d = given.get("d", 10)
            layout = (Layout.scratch(d, given.get("n_scratch")) if given.get("layout") == "scratch"
                      else Layout.plain(d))
            model_cfg = ModelConfig(layout, n_layers=given.get("layers", 2),
                                    n_heads=given.get("heads", 1),
                                    attention_dir=given.get("attention", "causal"),
                                    readout=given.get("readout", "P"),
                                    dtype=given.get("dtype", "float32"))
            base = {}
        base.update({k: v for k, v in given.items() if k in _TRAIN_FLAGS})
        if args.out is not None:
            base["out_dir"] = args.out
        if base.get("out_dir") is None:
            raise ValueError("--out DIR is required: the run directory for metrics and checkpoints")
        run = train(model_cfg, TrainConfig.from_dict(base), progress=progress)
    m = run.final_metrics
    print(f"{run.dir}: step {run.step}, MSE {m['mse']:.4g} ({m['attention_dir']}; the causal floor "
          f"of this layout and read-out is {m['causal_floor']:.4g}), rows exact {m['row_acc']:.1%}")


def _cmd_analyze(args: argparse.Namespace) -> None:
    """Circuit, per-cell templates, closest construction and ablations of a trained run (or of a
    construction); writes ``analysis.json`` into the run directory and prints the headline."""
    import json
    from pathlib import Path

    from . import HookedDisentangledTransformer, constructions, sample_batch
    from . import analysis as an

    if (args.run_dir is None) == (args.construction is None):
        raise ValueError("give a run directory or --construction NAME (one of them)")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.construction is not None:
        model = constructions.build(args.construction, args.d, args.beta)
        source, out_dir = f"construction {args.construction}", args.out
    else:
        run_dir = Path(args.run_dir)
        if not run_dir.is_dir():
            raise NotADirectoryError(f"run directory {run_dir} does not exist")
        model = HookedDisentangledTransformer.from_run(run_dir, step=args.step)
        source = f"run {run_dir}" + ("" if args.step is None else f" at step {args.step}")
        out_dir = args.out or run_dir
    cfg = model.cfg
    generator = torch.Generator(device=model.device).manual_seed(args.seed)
    batch = sample_batch(cfg.layout, args.n, generator=generator, dtype=cfg.torch_dtype)
    circuit = an.explain(model)
    closest = an.closest_construction(model, batch)
    ablations = an.standard_ablations(model, batch)
    report = {
        "source": source, "model": cfg.to_dict(), "n_samples": args.n, "seed": args.seed,
        "mse": ablations[0].mse_before, "causal_floor": ablations[0].causal_floor,
        "gauge_check": an.gauge_check(model, batch.X),  # max pattern change from gauge-fixing A
        "circuit": circuit.to_dict(),
        "cells": [row.to_dict() for row in an.match_templates(model)],
        "closest_constructions": [vars(match) for match in closest],
        "ablations": [result.to_dict() for result in ablations],
    }
    print(f"{source}: {cfg.attention_dir}, {cfg.layout}, reads {cfg.readout} rows; "
          f"MSE {report['mse']:.3g} (causal floor {report['causal_floor']:.3g})")
    print(f"gauge: attention patterns of A and gauge_fix(A) differ by {report['gauge_check']:.2g} "
          f"at most on {args.n} samples")
    print("\ncircuit: atoms of gauge_fix(A) holding >= 1% of their layer (layer: the note's, from 1; "
          "score: gauge-fixed cosine; raw: the raw cell's)")
    print(f"  {'layer':5s}  {'cell':34s} {'beta':>8s} {'share':>6s} {'score':>6s} {'raw':>6s}")
    for atom in sorted(circuit, key=lambda a: (a.layer, a.head, -a.share)):
        if atom.share >= 0.01:
            cell = f"{atom.label} at ({atom.query}, {atom.key})"
            same = "".join(f"  = {t} at ({q}, {k})" for q, k, t in atom.twins)
            print(f"  {atom.layer + 1:<5d}  {cell:34s} {atom.scale:8.3g} {atom.share:6.1%} "
                  f"{atom.score:6.3f} {atom.raw_score:6.3f}{same}")
    left = ", ".join(f"layer {i + 1} {s:.1%}" for i, s in enumerate(circuit.residual_share))
    print(f"  unexplained: {left}; {len(circuit)} atoms in all")
    if closest:
        print("\nclosest constructions (attention patterns, each at its best beta)")
        for match in closest[:3]:
            print(f"  {match.name:22s} beta {match.beta:<6g} pattern TV {match.pattern_tv:.3f}  "
                  f"weight cos {match.weight_cosine:.2f}  its cells found {match.cells_found:.0%}")
    print("\nablations")
    for result in ablations:
        print(f"  {result}")
    if out_dir is not None:
        path = Path(out_dir) / "analysis.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1, allow_nan=False))
        print(f"\nwrote {path}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="invperm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="forward pass of a small model; prints blocks and hooks")
    demo.add_argument("--d", type=int, default=10)
    demo.set_defaults(func=_cmd_demo)

    construct = sub.add_parser("construct", help="an analytic construction's cells and its error")
    construct.add_argument("name", nargs="?", help="construction name (see --list)")
    construct.add_argument("--list", action="store_true", help="list constructions and exit")
    construct.add_argument("--d", type=int, default=10)
    construct.add_argument("--beta", type=float, default=None, help="cell scale (default 100)")
    construct.add_argument("--n", type=int, default=256, help="samples for the verification")
    construct.add_argument("--seed", type=int, default=0)
    construct.set_defaults(func=_cmd_construct)

    tr = sub.add_parser("train", help="train a model; config, metrics and checkpoints under --out")
    tr.add_argument("--layout", choices=["plain", "scratch"], help="[P; Y_P] or [P; Y_P; S]")
    tr.add_argument("--n-scratch", type=int, help="scratch rows (default d)")
    tr.add_argument("--attention", choices=["causal", "bidirectional"], help="default causal")
    tr.add_argument("--readout", choices=["P", "Y", "S"], help="segment read out (default P)")
    tr.add_argument("--layers", type=int, help="default 2")
    tr.add_argument("--heads", type=int, help="heads per layer (default 1)")
    tr.add_argument("--d", type=int, help="task size (default 10)")
    tr.add_argument("--dtype", choices=["float32", "float64"])
    tr.add_argument("--steps", type=int, help="with --resume: extend the run to this many")
    tr.add_argument("--batch-size", type=int)
    tr.add_argument("--recipe", choices=["adam", "paper"], help="adam (default) or the note's")
    tr.add_argument("--lr", type=float)
    tr.add_argument("--optimizer", choices=["adam", "sgd"])
    tr.add_argument("--schedule", choices=["constant", "cosine"])
    tr.add_argument("--schedule-steps", type=int, help="cosine horizon (paper: 131072, the note's)")
    tr.add_argument("--seed", type=int)
    tr.add_argument("--device", help="auto (default), cpu, cuda, cuda:N")
    tr.add_argument("--threads", type=int, help="torch threads; on busy shared cores try 1")
    tr.add_argument("--eval-every", type=int)
    tr.add_argument("--eval-size", type=int)
    tr.add_argument("--checkpoint-every", type=int)
    tr.add_argument("--out", help="run directory (must not hold a run yet)")
    tr.add_argument("--config", help="JSON with 'model' and 'train', e.g. a run's config.json")
    tr.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint")
    tr.add_argument("--no-progress", action="store_true", help="no progress bar")
    tr.set_defaults(func=_cmd_train)
    analyze = sub.add_parser("analyze", help="circuit, templates, closest construction, ablations")
    analyze.add_argument("run_dir", nargs="?", help="a training run directory (gets analysis.json)")
    analyze.add_argument("--step", type=int, default=None, help="a checkpoint step (default: final)")
    analyze.add_argument("--construction", help="analyze a construction instead (see construct --list)")
    analyze.add_argument("--d", type=int, default=10, help="task size for --construction")
    analyze.add_argument("--beta", type=float, default=None, help="cell scale for --construction")
    analyze.add_argument("--n", type=int, default=512, help="samples for patterns and ablations")
    analyze.add_argument("--seed", type=int, default=0)
    analyze.add_argument("--out", help="directory for analysis.json (default: the run directory)")
    analyze.add_argument("--threads", type=int, help="torch threads; on busy shared cores try 1")
    analyze.set_defaults(func=_cmd_analyze)

    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (ValueError, FileNotFoundError, NotADirectoryError, PermissionError) as err:
        print(f"invperm {args.command}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
