"""The grids of the standard-transformer experiments plan what docs/standard.md says they run:
nothing here trains."""

from collections import Counter

from helpers import REPO

from invperm_interp.sweep.grid import load_grid

GRIDS = REPO / "analyses" / "grids"


def test_the_floor_grid_plans_8_seeds_per_architecture_and_width():
    grid = load_grid(GRIDS / "standard.toml")
    counts = Counter((j.model_cfg.readout, j.model_cfg.layernorm, j.model_cfg.d_mlp, j.model_cfg.d_model)
                     for j in grid.jobs)
    assert counts == {(readout, ln, mlp, m): 8 for readout, widths in (("P", (32, 64, 128)), ("Y", (64,)))
                      for ln, mlp in ((False, None), (True, 128)) for m in widths}
    assert {(j.model_cfg.arch, j.model_cfg.attention_dir, j.model_cfg.d) for j in grid.jobs} == {
        ("standard", "causal", 10)}
    assert {j.train_cfg.stop_at_floor for j in grid.jobs} == {1e-3} and grid.analysis is None


def test_the_solve_grid_plans_both_settings_and_architectures():
    grid = load_grid(GRIDS / "standard_solve.toml")
    counts = Counter((j.model_cfg.attention_dir, j.model_cfg.readout, j.model_cfg.layernorm)
                     for j in grid.jobs)
    assert counts == {(a, r, ln): 2 if ln else 3 for a, r in (("bidirectional", "P"), ("causal", "S"))
                      for ln in (False, True)}
    assert {j.train_cfg.stop_at_mse for j in grid.jobs} == {1e-3}


def test_the_standard_census_plans_32_seeds_at_d10_and_8_elsewhere_through_the_map():
    grid = load_grid(GRIDS / "census_standard.toml")
    counts = Counter((j.model_cfg.attention_dir, j.model_cfg.d, j.model_cfg.n_heads) for j in grid.jobs)
    assert counts == {(a, d, h): 32 if d == 10 else 8 for a in ("bidirectional", "causal")
                      for d in (6, 8, 10, 12) for h in (1, 2)}
    assert {(j.model_cfg.arch, j.model_cfg.layernorm, j.model_cfg.d_mlp) for j in grid.jobs} == {
        ("standard", False, None)}  # the form the exact map reads
    assert grid.analysis == load_grid(GRIDS / "census.toml").analysis
