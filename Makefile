# The two commands of the README: `make run` and `make test`. Each makes its own venv.
# docs/development.md describes every target.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# `make run` (the edge daemon) needs only the runtime dependencies; `make bench` the `cluster`
# extra too (asyncpg); the other targets the `test` and `cluster` extras (the tools, the test
# libraries and both profiles). Each stamp is its own install.
RUNTIME_STAMP := $(VENV)/.installed-runtime
CLUSTER_STAMP := $(VENV)/.installed-cluster

.PHONY: run test test-slow lint format typecheck pytest bench bench-peers lock dist clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,cluster,mcp,oidc,otel]'
	touch $(STAMP)

$(RUNTIME_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUNTIME_STAMP)

$(CLUSTER_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[cluster]'
	touch $(CLUSTER_STAMP)

# The edge daemon on var/qinglong.db, its plans encrypted at rest under var/plan-keys (made once).
EDGE := QINGLONG_PLAN_KEYRING_FILE=var/plan-keys $(BIN)/qinglong-dispatcher --profile edge --database sqlite:///var/qinglong.db

run: $(RUNTIME_STAMP)
	mkdir -p var
	test -f var/plan-keys || $(BIN)/qinglong-dispatcher keys generate --out var/plan-keys
	$(EDGE) migrate
	$(EDGE) run

lint: $(STAMP)
	$(BIN)/ruff check qinglong_dispatcher bench tests examples
	$(BIN)/ruff format --check qinglong_dispatcher bench tests examples
	$(BIN)/lint-imports

# Rewrites files: the fixes ruff can make safely, then the formatter (last, so that fixed
# code is formatted too). `make lint` checks both.
format: $(STAMP)
	$(BIN)/ruff check --fix qinglong_dispatcher bench tests examples
	$(BIN)/ruff format qinglong_dispatcher bench tests examples

typecheck: $(STAMP)
	$(BIN)/mypy

# `make test` leaves out the tests marked slow (failover, SIGKILLs, the edge device under its
# limits, 200,000 dispatches, the random state machine, the bench); `make test-slow` runs
# them, and CI (.ci/run) runs both.
# `make test` runs its tests on PYTEST_WORKERS processes (pytest-xdist), each test wherever a
# worker is free: most of them start command-line or daemon processes or wait on a database or
# a socket, so one process leaves the cores idle. Each worker is a process of its own, so its
# databases, logins and temporary files carry its own process id (tests/support/stores.py).
# `--dist loadgroup` keeps the tests of one `xdist_group` mark on one worker. The slow tests
# (SIGKILLs, failovers, Patroni, timing under load) stay on one process.
PYTEST_WORKERS ?= 3
pytest: $(STAMP)
	$(BIN)/pytest -m "not slow" -n $(PYTEST_WORKERS) --dist loadgroup

test: lint typecheck pytest

test-slow: $(STAMP)
	$(BIN)/pytest -m slow

BENCH_PG_URL ?= $(or $(QINGLONG_BENCH_PG_URL),postgresql://postgres@127.0.0.1:5432/postgres)

bench: $(CLUSTER_STAMP)
	$(BIN)/qinglong-dispatcher bench --profile edge
	$(BIN)/qinglong-dispatcher bench --profile cluster --database $(BENCH_PG_URL)

# Our rates beside huey's and pgqueuer's (docs/performance.md): the harness lives in bench/peers,
# outside the wheel, and installs the peers in a venv of their own (var/peers-venv). Our
# cluster side needs the `cluster` extra.
bench-peers: $(CLUSTER_STAMP)
	$(BIN)/python -m bench.peers --database $(BENCH_PG_URL)

# The runtime locks: the package's dependencies (the edge's, deploy/requirements.lock) and
# with its `cluster` extra (asyncpg, deploy/requirements-cluster.lock), pinned to the versions
# installed in .venv, each with the hash of every file PyPI has for that version (any
# platform), so that a lock installs on a router of another architecture too. pip-tools runs
# in a venv of its own.
LOCK := deploy/requirements.lock
CLUSTER_LOCK := deploy/requirements-cluster.lock
# The hashes of the index's own files, never of a local wheel folder a pip.conf names.
PIP_COMPILE = env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null \
	CUSTOM_COMPILE_COMMAND="make lock" $(VENV)/lock-tools/bin/pip-compile --quiet \
	--generate-hashes --strip-extras --allow-unsafe --no-emit-index-url \
	--no-emit-find-links --annotation-style=line \
	--constraint $(VENV)/installed-versions.txt

lock: $(STAMP)
	$(PYTHON) -m venv $(VENV)/lock-tools
	$(VENV)/lock-tools/bin/python -m pip install --quiet pip-tools
	$(BIN)/python -m pip freeze --exclude-editable > $(VENV)/installed-versions.txt
	$(PIP_COMPILE) --output-file $(LOCK) pyproject.toml
	$(PIP_COMPILE) --extra cluster --output-file $(CLUSTER_LOCK) pyproject.toml
	sed -i -e 's/ # via -c [^,]*, / # via /' -e 's/ *# via -c [^,]*$$//' $(LOCK) $(CLUSTER_LOCK)

# The release artefacts of docs/installation.md: the wheel, the two locks and a wheelhouse of
# the cluster lock's files (checked against its hashes; the edge lock is a part of it) in
# $(DIST). The wheelhouse is for this machine's platform; for another, e.g.
#   make dist WHEELHOUSE_PLATFORM="--platform manylinux2014_aarch64 --python-version 3.11"
DIST ?= dist
WHEELHOUSE_PLATFORM ?=

dist: $(STAMP)
	rm -rf $(DIST)
	$(BIN)/python -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir $(DIST) .
	cp $(LOCK) $(DIST)/requirements.lock
	cp $(CLUSTER_LOCK) $(DIST)/requirements-cluster.lock
	$(BIN)/python -m pip download --quiet --only-binary=:all: --no-deps --require-hashes \
	    --requirement $(CLUSTER_LOCK) --dest $(DIST)/wheelhouse $(WHEELHOUSE_PLATFORM)

clean:
	rm -rf $(VENV) var dist .pytest_cache .mypy_cache .ruff_cache
