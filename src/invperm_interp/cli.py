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
