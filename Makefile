# `make test` and `make demo` work on a fresh machine with nothing but Python 3.10+.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test test-fast test-slurm demo reproduce sweep census dynamics scrubbing setup lint bench clean

setup: $(STAMP)

# torch is installed first and pinned (constraints.txt) so nothing pulls a CUDA build.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -m "not slurm"

# invperm sweep on a real Slurm cluster; `sudo sh benchmarks/slurm_local.sh` starts a single-node
# one (the tests skip, saying so, where none answers).
test-slurm: $(STAMP)
	$(PY) -m pytest -m slurm tests/slurm

# Everything but the tests marked slow (processes, training, the browser): a quick loop while editing.
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow and not slurm"

demo: $(STAMP)
	$(VENV)/bin/invperm demo

# The note's claims' tables and figures under assets/ (trains 8 models: about 12 minutes on 2
# cores, most of it the paper recipe's 10,000 steps); `make census`, `make dynamics` and
# `make sweep` write the rest of assets/.
reproduce: $(STAMP)
	for script in constructions_table causal_floors learned_circuits patching paper_recipe; do \
		$(PY) analyses/$$script.py || exit 1; done

# Beyond the note: learning speed and mechanism across d (20 runs, one process per core, early
# stopping; resumable). Table and figure: runs/sweep_d/sweep_report.{md,png,svg}, copied to
# assets/sweep_d.{md,png,svg}.
sweep: $(STAMP)
	$(VENV)/bin/invperm sweep analyses/grids/sweep_d.toml --out runs/sweep_d
	$(VENV)/bin/invperm sweep-report runs/sweep_d
	for ext in md png svg; do cp runs/sweep_d/sweep_report.$$ext assets/sweep_d.$$ext || exit 1; done

# Beyond the note: what training learns, counted over seeds: the grid analyses/grids/census.toml
# (224 runs with early stopping, each analysed; one worker process per core), then its report in
# assets/census.{md,json,png,svg}. Resumable: finished runs and analyses are skipped.
census: $(STAMP)
	$(VENV)/bin/invperm sweep analyses/grids/census.toml --out runs/census
	$(PY) analyses/census_report.py runs/census --update-assets

# Beyond the note: when each circuit forms. The census's d = 10 models with a checkpoint every 25
# steps until solved (64 runs, one worker), then every checkpoint analysed against the final
# circuit: assets/dynamics.{md,json,png,svg}. Resumable; timelines are cached per run.
dynamics: $(STAMP)
	$(VENV)/bin/invperm sweep analyses/grids/dynamics.toml --out runs/dynamics --workers 1
	$(PY) analyses/dynamics.py runs/dynamics

# Beyond the census: which test says "this circuit is the mechanism". Sixteen of the census's
# causal-scratch d = 10 runs re-trained (one worker, about 4 CPU minutes), then each claim scrubbed
# and path-patched (about half a CPU minute a run): assets/scrubbing.{md,json}, docs/scrubbing.md.
scrubbing: $(STAMP)
	$(VENV)/bin/invperm sweep analyses/grids/scrubbing.toml --out runs/scrubbing --workers 1
	$(PY) analyses/scrubbing.py runs/scrubbing

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks analyses

bench: $(STAMP)
	$(PY) benchmarks/forward.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
