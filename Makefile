# Every target creates .venv from this repository's own files if it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_WORKERS ?= 2

.PHONY: demo test test-unit test-engine test-functional test-integration lint bench fuzz clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,bench]"
	touch $(STAMP)

# Run the integration project through its batches (seed -> run -> test each time).
demo: $(STAMP)
	$(BIN)/python scripts/demo.py

# Every test: lint, unit, engine, dbt functional and the integration project.
test: $(STAMP) lint
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile tests

lint: $(STAMP)
	$(BIN)/ruff check dbt tests scripts benchmarks
	$(BIN)/mypy dbt/adapters/rowmerge

# Differential fuzzing against the DuckDB oracle (tests/differential): N random merges from SEED;
# prints a shrunk reproduction for every mismatch. `make test` runs a fixed seed of 300.
N ?= 1000
SEED ?= 1
JOBS ?= 3
fuzz: $(STAMP)
	$(BIN)/python -m tests.differential.fuzz --n $(N) --seed $(SEED) --jobs $(JOBS)

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) integration_project/target integration_project/logs
