# `make test` and `make demo` work on a fresh machine with nothing but Python 3.10+.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test test-fast test-slurm demo docs notebook reproduce sweep census census-shapes census-standard dynamics scrubbing discovery discovered standard setup lint bench clean

setup: $(STAMP)

# torch is installed first and pinned (constraints.txt) so nothing pulls a CUDA build.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# The suite across the cores (pytest-xdist, one worker per core; TEST_WORKERS=0 runs it in this
# process). worksteal: a worker that runs out takes tests from a busy one (a few take a minute).
TEST_WORKERS ?= auto
PARALLEL := -n $(TEST_WORKERS) --dist worksteal

test: $(STAMP)
	$(PY) -m pytest -m "not slurm" $(PARALLEL)

# invperm sweep on a real Slurm cluster; `sudo sh benchmarks/slurm_local.sh` starts a single-node
# one (the tests skip, saying so, where none answers).
test-slurm: $(STAMP)
	$(PY) -m pytest -m slurm tests/slurm

# Everything but the tests marked slow (processes, training, the browser): a quick loop while editing.
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow and not slurm" $(PARALLEL)

demo: $(STAMP)
	$(VENV)/bin/invperm demo

# The documentation site (mkdocs.yml; docs/, with assets/ and notebooks/ added) into site/, offline:
# open site/index.html. Strict: a broken link or an unknown name fails it (make test builds it too).
docs: $(STAMP)
	$(PY) -m mkdocs build --strict

# The notebook tour (notebooks/tour.ipynb) in JupyterLab, with the project's kernel. JupyterLab is
# installed into $(VENV) on first use, pinned, and not with the dev extra (make test does not need it).
JUPYTERLAB := 4.6.6

notebook: $(STAMP)
	$(PY) -c "import importlib.metadata as m; assert m.version('jupyterlab') == '$(JUPYTERLAB)'" \
		2>/dev/null || $(PY) -m pip install --quiet -c constraints.txt jupyterlab==$(JUPYTERLAB)
	$(VENV)/bin/jupyter lab notebooks/tour.ipynb

# The note's claims' tables and figures under assets/ (trains 8 models into runs/reproduce: about
# 12 minutes on 2 cores, most of it the paper recipe's 10,000 steps); `make census`, `make dynamics`
# and `make sweep` write the rest of assets/. The scripts write into assets/ only when given
# --update-assets, as every target here that rewrites assets/ does (without it: beside their runs).
reproduce: $(STAMP)
	for script in constructions_table readings_table causal_floors learned_circuits patching paper_recipe; do \
		$(PY) analyses/$$script.py --update-assets || exit 1; done

# Beyond the note: learning speed and mechanism across d (20 runs, one process per core, early
# stopping; resumable). Table and figure: runs/sweep_d/sweep_report.{md,png,svg}, copied to
# assets/sweep_d.{md,png,svg}.
sweep: $(STAMP)
	$(VENV)/bin/invperm sweep analyses/grids/sweep_d.toml --out runs/sweep_d
	$(VENV)/bin/invperm sweep-report runs/sweep_d
	for ext in md png svg; do cp runs/sweep_d/sweep_report.$$ext assets/sweep_d.$$ext || exit 1; done

# Beyond the note: what training learns, counted over seeds: the grid analyses/grids/census.toml
# (224 runs with early stopping, each analysed; one worker process per core: 19-23 minutes on
# 2 cores over five runs on one shared machine), then its report in
# assets/census.{md,json,png,svg}. Resumable: finished runs and analyses are skipped.
census: $(STAMP)
	$(VENV)/bin/invperm sweep analyses/grids/census.toml --out runs/census
	$(PY) analyses/census_report.py runs/census --update-assets

# Beyond the note: what training learns on deeper and wider models (docs/shapes.md): the grid
# analyses/grids/census_shapes.toml (128 runs: 2 or 3 layers of 1 or 2 heads, d = 8), then its
# report in assets/census_shapes.{md,json,png}. Resumable like `make census`.
census-shapes: $(STAMP)
	$(VENV)/bin/invperm sweep analyses/grids/census_shapes.toml --out runs/census_shapes
	$(PY) analyses/census_shapes_report.py runs/census_shapes --update-assets

# Beyond the note: when each circuit forms. The census's d = 10 models with a checkpoint every 25
# steps until solved (64 runs, one worker), then every checkpoint analysed against the final
# circuit: assets/dynamics.{md,json,png,svg}; then each run's transition trained again in memory
# and analysed every 5 steps: assets/dynamics_fine.{md,json,png,svg} (about 11 minutes on 2 cores).
# Resumable; timelines are cached per run.
dynamics: $(STAMP)
	$(VENV)/bin/invperm sweep analyses/grids/dynamics.toml --out runs/dynamics --workers 1
	$(PY) analyses/dynamics.py runs/dynamics --update-assets
	$(PY) analyses/dynamics_fine.py runs/dynamics --update-assets

# Beyond the census: which test says "this circuit is the mechanism". Sixteen of the census's
# causal-scratch d = 10 runs re-trained (one worker, about 4 CPU minutes), then each claim scrubbed
# and path-patched (about half a CPU minute a run): assets/scrubbing.{md,json}, read in
# docs/results/scrubbing.md.
scrubbing: $(STAMP)
	$(VENV)/bin/invperm sweep analyses/grids/scrubbing.toml --out runs/scrubbing --workers 1
	$(PY) analyses/scrubbing.py runs/scrubbing --update-assets

# The causal-scratch runs the census's rule left unnamed before the guarded superposed forms were
# registered that stop by step 2,000, re-trained with four named ones (21 runs, about 30 CPU minutes
# with their analysis), grouped by cell set and by behaviour and named with and without the guarded
# forms: assets/discovery.{md,json}, read in docs/results/census.md.
discovery: $(STAMP)
	$(VENV)/bin/invperm sweep analyses/grids/discovery.toml --out runs/discovery --workers 1
	$(PY) analyses/discovery.py runs/discovery --update-assets

# Beyond the note: constructions no one wrote down. The 3-layer configurations the rule named none
# of (analyses/grids/discovery_shapes.toml, 48 runs), their unnamed circuits made exact constructions
# and registered (invperm discover --register: src/invperm_interp/maths/discovered.json, reviewed
# like code), the same runs analysed again with them, then 48 runs on seeds discovery never saw
# (analyses/grids/discovery_heldout.toml), counted with and without the discovered forms:
# assets/discovery_census.{md,json} and assets/discovered/, read in docs/results/discovered.md.
discovered: $(STAMP)
	$(VENV)/bin/invperm sweep analyses/grids/discovery_shapes.toml --out runs/discovery_shapes
	$(VENV)/bin/invperm discover runs/discovery_shapes --register
	$(VENV)/bin/invperm sweep analyses/grids/discovery_shapes.toml --out runs/discovery_shapes
	$(VENV)/bin/invperm sweep analyses/grids/discovery_heldout.toml --out runs/discovery_heldout
	$(PY) analyses/discovery_census.py runs/discovery_shapes runs/discovery_heldout --update-assets

# Beyond the note: the census on standard transformers beside the disentangled one (docs/standard.md):
# the grid analyses/grids/census_standard.toml (224 runs, attention-only, d_model 64; its dry run
# says about 12 CPU hours), then assets/census_standard.{md,json,png}; then the first 8 unsolved
# one-head causal scratch runs at d = 10 trained on to 5,000 steps in copies of their own
# (assets/standard_scratch_long.json); then the solved runs' minimal circuits under mean ablation,
# both settings, beside 4 disentangled census runs per setting and d (assets/minimal_under_mean.json);
# then seeds 0-7 of the one-head causal scratch runs at d = 10 again at lr 3e-3 (its sweep record:
# assets/standard_scratch_lr.jsonl). Resumable like `make census`.
census-standard: $(STAMP)
	$(VENV)/bin/invperm sweep analyses/grids/census_standard.toml --out runs/census_standard
	$(PY) analyses/census_standard_report.py runs/census_standard --update-assets
	$(PY) analyses/continue_unsolved.py runs/census_standard runs/standard_scratch_long \
		--prefix scratch_d10_n_heads1_ --steps 5000 --limit 8
	cp runs/standard_scratch_long/continued.json assets/standard_scratch_long.json
	$(PY) analyses/minimal_under_mean.py runs/census_standard --out assets/minimal_under_mean.json \
		--update-assets
	$(PY) analyses/minimal_under_mean.py runs/census --per-group 4 --out assets/minimal_under_mean.json \
		--update-assets
	$(VENV)/bin/invperm sweep analyses/grids/standard_scratch_lr.toml --out runs/standard_scratch_lr
	cp runs/standard_scratch_lr/sweep.jsonl assets/standard_scratch_lr.jsonl

# Beyond the note: standard transformers (docs/standard.md). Causal standard models against the
# exact floors, d_model 32/64/128, with and without LayerNorm and MLPs, 8 seeds each (64 runs); the
# Y_P models for up to 4,000 steps (4 runs); then bidirectional and scratch models solving, each
# solved mechanism named through the exact map (10 runs). d = 10, two workers, resumable; about
# 25 CPU minutes: assets/standard.{md,json,png}.
standard: $(STAMP)
	$(VENV)/bin/invperm sweep analyses/grids/standard.toml --out runs/standard --workers 2
	$(VENV)/bin/invperm sweep analyses/grids/standard_long.toml --out runs/standard_long --workers 2
	$(VENV)/bin/invperm sweep analyses/grids/standard_solve.toml --out runs/standard_solve --workers 2
	$(PY) analyses/standard.py --floor runs/standard --long runs/standard_long --solve runs/standard_solve \
		--update-assets

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks analyses

bench: $(STAMP)
	$(PY) benchmarks/forward.py

clean:
	rm -rf $(VENV) build site src/*.egg-info .pytest_cache
