# Every target creates .venv from this repository's own files if it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_WORKERS ?= 2

.PHONY: demo test test-long lint bench bench-quick bench-sizes bench-scale bench-aging fuzz undo-campaign clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,bench]"
	touch $(STAMP)

# The adapter alone (what a user installs): enough for the demo.
RUN_STAMP := $(VENV)/.installed-run
$(RUN_STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(RUN_STAMP)

# Run the integration project through its batches (one dbt build per batch, then --empty runs).
# CONNECT=1: the same through Spark Connect (a server from the PySpark distribution, started
# and stopped here; or ROWMERGE_CONNECT_URL=sc://host:port).
CONNECT ?=
CONNECT_STAMP := $(VENV)/.installed-connect
$(CONNECT_STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[connect]"
	touch $(CONNECT_STAMP)

demo: $(RUN_STAMP) $(if $(CONNECT),$(CONNECT_STAMP))
	$(BIN)/python scripts/demo.py $(if $(CONNECT),--connect)

# Every test but the `long` ones: lint, unit, engine, dbt functional, the integration project
# (locally and on a standalone cluster) and the Connect checks.
test: $(STAMP) lint
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=40 -m "not long" tests

# Every test, with the reliability campaigns whole (tests/reliability/harness.py, LONG_ENV): a
# crash after every step of the commit protocol and 20 kill trials, where `make test` crashes
# after each distinct step and runs 8; and the `long` tests, which rerun local-mode coverage away
# from local mode (the engine third on the cluster and through Connect, a fault-injection shape
# with its victims on the cluster) or crash points a process-kill suite of `make test` also
# covers (tests/sampling.py; the nmbs_partitioned shape without its compaction).
test-long: $(STAMP) lint
	ROWMERGE_LONG=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20 tests

lint: $(STAMP)
	$(BIN)/ruff check dbt tests scripts benchmarks
	$(BIN)/mypy dbt/adapters/rowmerge

# Differential fuzzing against the DuckDB oracle (tests/differential): N random merges from SEED;
# prints a shrunk reproduction for every mismatch. `make test` runs a fixed seed of 150 cases.
N ?= 1000
SEED ?= 1
JOBS ?= 3
fuzz: $(STAMP)
	$(BIN)/python -m tests.differential.fuzz --n $(N) --seed $(SEED) --jobs $(JOBS)

# Time travel and undo proven on random histories (tests/reliability/undo_campaign.py): MERGES
# random merges with the change feed on and RESTORES restores at random points, on a partitioned
# and an unpartitioned table; every version read back with as_of, every restore's feed applied.
MERGES ?= 200
RESTORES ?= 20
undo-campaign: $(STAMP)
	$(BIN)/python -m tests.reliability.undo_campaign --merges $(MERGES) --restores $(RESTORES) --seed $(SEED)

# The merge benchmark (Delta Lake's grid + our cases; row_level_merge vs full rewrite vs delta-rs):
# 10M rows in 64 files, 5 timed runs per case and system, interleaved; results in benchmarks/results/.
# BENCH_ARGS="--minutes M" ends a sitting between two cases (exit code 3), BENCH_ARGS="--resume
# --minutes M" goes on from the cases finished (benchmarks/progress.py); for every run.py target.
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python benchmarks/run.py --rows 10000000 --files 64 --repeat 5 $(BENCH_ARGS)

# Smoke run of every case: 200k rows in 8 files, one run, results in a scratch folder.
BENCH_QUICK_OUT ?= /tmp/rowmerge-bench-quick
bench-quick: $(STAMP)
	$(BIN)/python benchmarks/run.py --rows 200000 --files 8 --repeat 1 --no-warmup \
		--out $(BENCH_QUICK_OUT) --work $(BENCH_QUICK_OUT)/work

# The grid at 1M and 2M rows (16 and 32 files), 5 runs per case and system, interleaved, reported
# with the 10M grid of `make bench` of the same commit (run that first: it is not timed twice).
bench-sizes: $(STAMP)
	$(BIN)/python benchmarks/run.py --sizes 1000000:16,2000000:32 --cases grid --repeat 5 \
		--sizes-from benchmarks/results/results.json --out benchmarks/results/sizes $(BENCH_ARGS)

# The scale curve (1M, 10M, 50M rows), then the grid at 50M rows in 320 files, 5 runs per case
# and system (not part of `make bench`; many hours on 2 cores).
bench-scale: $(STAMP)
	$(BIN)/python benchmarks/run.py --scale --rows 10000000 --files 64 $(BENCH_ARGS)
	$(BIN)/python benchmarks/run.py --sizes 50000000:320 --cases grid --repeat 5 \
		--out benchmarks/results/scale-grid $(BENCH_ARGS)

# A table's life (benchmarks/aging.py): 1,000 merges in each of four shapes from 2M rows in 16
# files, row_level_merge (defaults: auto-compaction on) against itself with auto_compact off and
# delta-rs (as is, and compacted every 100 merges), interleaved merge by merge; several hours.
bench-aging: $(STAMP)
	$(BIN)/python benchmarks/aging.py --rows 2000000 --files 16 --merges 1000 $(AGING_ARGS)

clean:
	rm -rf $(VENV) integration_project/target integration_project/logs
