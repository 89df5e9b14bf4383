"""The dry run's price of a training step (``sweep.plan.train_seconds``) against the step measured.

For runs of the project's grids (the census, the standard census, the standard floor grid), one
thread each: the seconds of one Adam step at the grid's batch, measured as the difference between
training ``--long`` and ``--short`` steps (so start-up and the evaluations cancel), best of
``--rounds`` rounds that alternate the runs; beside it the dry run's estimate and their ratio. Then
the step model's constants refitted to these measurements (least squares on log time), per family:
the disentangled model (and standard models through their map) and standard models in d_model.
Measure on a quiet machine: the constants in sweep/plan.py come from this script.
Usage: python benchmarks/step_cost.py [--rounds 2] [--short 10] [--long 50]
"""

from __future__ import annotations

import argparse
import dataclasses
import math

import numpy as np
import torch

RUNS = {
    "analyses/grids/census.toml": ["bidirectional_d6_seed0", "bidirectional_d10_seed0",
                                   "bidirectional_d12_seed0", "scratch_d6_seed0", "scratch_d10_seed0",
                                   "scratch_d12_seed0"],
    "analyses/grids/census_standard.toml": [
        "bidirectional_d6_n_heads1_seed0", "bidirectional_d10_n_heads1_seed0",
        "bidirectional_d10_n_heads2_seed0", "bidirectional_d12_n_heads2_seed0",
        "scratch_d6_n_heads1_seed0", "scratch_d10_n_heads1_seed0", "scratch_d10_n_heads2_seed0",
        "scratch_d12_n_heads1_seed0"],
    "analyses/grids/standard.toml": ["causal_P_d_model32_seed0", "causal_P_d_model128_seed0",
                                     "causal_P_ln_mlp_d_model64_seed0", "causal_Y_ln_mlp_seed0"],
}


def step_seconds(job, steps: int) -> float:
    """Wall seconds of training ``job`` for ``steps`` steps (one evaluation, at the end)."""
    from invperm_interp.training.single import train

    cfg = dataclasses.replace(job.train_cfg, steps=steps, eval_every=steps, stop_at_mse=None)
    return train(job.model_cfg, cfg, progress=False).metrics[-1].wall_time


def fit(units: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
    """``fixed, per_unit`` minimising the squared log ratio of ``fixed + per_unit * units`` to
    ``seconds`` (a grid over ``fixed``, then a 1-D search over ``per_unit``)."""
    best = (math.inf, 0.0, 0.0)
    for fixed in np.linspace(0, seconds.min(), 101):
        for per_unit in np.geomspace(1e-13, 1e-8, 501):
            loss = float(np.sum(np.log((fixed + per_unit * units) / seconds) ** 2))
            best = min(best, (loss, fixed, per_unit))
    return best[1], best[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--short", type=int, default=10)
    parser.add_argument("--long", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from invperm_interp.sweep.grid import load_grid
    from invperm_interp.sweep.plan import step_model

    jobs = []
    for path, names in RUNS.items():
        grid = {job.name: job for job in load_grid(path, allow_large=True).jobs}
        jobs += [(path.rsplit("/", 1)[1], grid[name]) for name in names]
    measured = {name: math.inf for _, job in jobs for name in [job.name]}
    for r in range(args.rounds):
        for _, job in jobs:
            dt = step_seconds(job, args.long) - step_seconds(job, args.short)
            measured[job.name] = min(measured[job.name], dt / (args.long - args.short))
            print(f"round {r + 1}: {job.name}: {measured[job.name] * 1e3:.1f} ms/step", flush=True)
    print(f"\none thread, best of {args.rounds} rounds; (time of {args.long} steps - time of "
          f"{args.short}) / {args.long - args.short}")
    print(f"{'grid':22} {'run':36} {'family':9} {'units':>10} {'measured':>9} {'estimate':>9} ratio")
    families: dict[str, list] = {}
    for grid_name, job in jobs:
        family, units, fixed, per_unit = step_model(job)
        estimate = fixed + per_unit * units
        families.setdefault(family, []).append((units, measured[job.name]))
        print(f"{grid_name:22} {job.name:36} {family:9} {units:10.3g} "
              f"{measured[job.name] * 1e3:7.1f}ms {estimate * 1e3:7.1f}ms "
              f"{measured[job.name] / estimate:5.2f}")
    print("\nrefitted step model (seconds = fixed + per_unit * units):")
    for family, rows in families.items():
        units, seconds = (np.array(column) for column in zip(*rows))
        fixed, per_unit = fit(units, seconds)
        ratios = seconds / (fixed + per_unit * units)
        print(f"  {family:9} fixed {fixed:.2e} s, per_unit {per_unit:.3g} s; measured/fit "
              f"{ratios.min():.2f}-{ratios.max():.2f} over {len(rows)} runs")


if __name__ == "__main__":
    main()
