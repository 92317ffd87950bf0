# Every target creates .venv from this repository's own files if it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_WORKERS ?= 2

.PHONY: demo test test-unit test-engine test-functional test-integration lint bench clean

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

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) integration_project/target integration_project/logs
