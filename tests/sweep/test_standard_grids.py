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


def test_the_dry_run_prices_a_standard_model_by_the_forward_it_runs():
    from dataclasses import replace

    from invperm_interp.model.standard import note_is_cheaper, row_costs
    from invperm_interp.sweep.plan import STEP_COST, step_model, train_seconds

    grid = load_grid(GRIDS / "standard.toml")
    job = next(j for j in grid.jobs if j.model_cfg.d_model == 32 and j.model_cfg.d_mlp is None)
    cfg = job.model_cfg
    # through the map: counted as the disentangled model of its widths, at the standard model's
    # own per-step price (its parameters in d_model and the map itself cost more per step)
    assert note_is_cheaper(cfg)
    twin = replace(job, model_cfg=replace(cfg, arch="disentangled", d_model=None, d_head=None))
    assert step_model(job) == ("standard", step_model(twin)[1], *STEP_COST["standard"])
    assert step_model(twin)[0] == "note" and train_seconds(job) > train_seconds(twin)
    # in d_model (LayerNorm, MLP): the cost grows with d_model and the MLP, as multiplications do
    m, dh, T, mlp = 64, 64, cfg.T, 128
    direct = replace(cfg, d_model=m, d_head=dh, layernorm=True, d_mlp=mlp)
    assert row_costs(direct)[1] == 2 * (dh * (4 * m + 2 * T) + 2 * m * mlp)  # two layers of one head
    small, wide = (replace(job, model_cfg=replace(direct, d_model=w, d_head=w)) for w in (32, 128))
    assert train_seconds(wide) > 3 * train_seconds(small) > 3 * train_seconds(job)


def test_the_long_grid_is_the_floor_grids_y_p_models_with_ten_times_the_steps():
    floor = {(j.variant, j.model_cfg, j.train_cfg.seed): j.train_cfg
             for j in load_grid(GRIDS / "standard.toml").jobs
             if j.model_cfg.readout == "Y" and j.train_cfg.seed < 2}
    long = {(j.variant, j.model_cfg, j.train_cfg.seed): j.train_cfg
            for j in load_grid(GRIDS / "standard_long.toml").jobs}
    assert set(long) == set(floor) and len(long) == 4  # the same models, 2 seeds each
    for key, train in long.items():
        assert train.steps == 10 * floor[key].steps
        assert (train.lr, train.batch_size, train.stop_at_floor) == (
            floor[key].lr, floor[key].batch_size, floor[key].stop_at_floor)
