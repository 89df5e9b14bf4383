"""Claim: activation patching localises each mechanism to the named blocks it uses.

For constructions and the learned bidirectional models (from learned_circuits.py), patch each named
block of the clean run into a corrupted one (keep Y_P and change P, or keep P and change Y_P) at
every layer's input, and plot how much of the clean output each block restores. Writes
patching/NAME.{png,svg} and patching.{json,md} beside the runs read (``--runs``, default
runs/reproduce/), or into ``--out DIR``, or into the checkout's assets/ with ``--update-assets`` (as
``make reproduce`` does).

    python analyses/patching.py [--runs DIR] [--out DIR | --update-assets]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from common import REPRODUCE, add_output_arguments, output, output_folder, refuse, write_table

from invperm_interp import Run, make_input, sample_batch
from invperm_interp.analysis import mse_to, patch_blocks
from invperm_interp.labels import hook_label
from invperm_interp.maths import constructions
from invperm_interp.viz.heatmaps import PATCH_CELL_IN, plot_patching, save_figures


def models(runs: Path) -> dict:
    out = {name: constructions.build(name, 10) for name in ("theorem2", "two_block", "appendix_b",
                                                             "theorem3", "theorem3_two_block")}
    for run_dir in sorted(runs.glob("bidirectional_seed*")) + sorted(runs.glob("scratch_causal*")):
        if (run_dir / "final.safetensors").is_file():
            out[f"learned {run_dir.name}"] = Run.load(run_dir).model
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=str(REPRODUCE),
                        help="the runs of learned_circuits.py (its learned models are patched too)")
    parser.add_argument("--n", type=int, default=64)
    add_output_arguments(parser, "the --runs folder")
    args = parser.parse_args(argv)
    try:
        out = output_folder(args, Path(args.runs))
    except ValueError as err:
        return refuse("patching", err)

    rows = []
    for name, model in models(Path(args.runs)).items():
        layout, dtype = model.cfg.layout, model.cfg.torch_dtype
        clean = sample_batch(layout, args.n, torch.Generator().manual_seed(0), dtype=dtype)
        other = sample_batch(layout, args.n, torch.Generator().manual_seed(1), dtype=dtype)
        corruptions = {"P changed, Y_P kept": make_input(layout, other.P, clean.Y_P),
                       "Y_P changed, P kept": make_input(layout, clean.P, other.Y_P)}
        n_blocks = len(model.stream.blocks(model.cfg.n_layers - 1))
        height = 2 * (PATCH_CELL_IN * model.cfg.n_layers + 2.4)
        fig, axes = plt.subplots(2, 1, figsize=(PATCH_CELL_IN * n_blocks + 4.2, height))
        for ax, (label, corrupted) in zip(axes, corruptions.items()):
            result = patch_blocks(model, clean.X, corrupted.X.to(dtype), mse_to(clean.Y),
                                  normalize=True)
            plot_patching(result, f"{name}: {label} (1 = block restores the clean output)", ax)
            for layer in result.labels["layer"]:
                values = result.sel(layer=layer)
                best = int(torch.nan_to_num(values, nan=-1e9).argmax())
                rows.append({"model": name, "corruption": label,
                             "layer_input": hook_label("resid_pre", layer),
                             "best_block": result.labels["block"][best],
                             "restores": float(values[best])})
        fig.tight_layout()
        save_figures(fig, output(out, f"patching/{name.replace(' ', '_')}.png"))
    write_table(out, "patching", rows, "Activation patching: the block that restores most, per layer input",
                "Normalised: (metric - corrupted) / (clean - corrupted) with the note's MSE against the "
                "clean Y; 1 = fully restored.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
