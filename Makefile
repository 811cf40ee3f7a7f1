# The two commands of the README: `make run` and `make test`. Each makes its own venv.
# docs/development.md describes every target.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# `make run` and `make bench` need only the runtime dependencies; the other targets the
# `test` extra too (the tools and the test libraries). Each stamp is its own install.
RUNTIME_STAMP := $(VENV)/.installed-runtime

.PHONY: run test test-slow lint format typecheck pytest bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

$(RUNTIME_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUNTIME_STAMP)

run: $(RUNTIME_STAMP)
	mkdir -p var
	$(BIN)/qinglong-dispatcher --profile edge --database sqlite:///var/qinglong.db migrate
	$(BIN)/qinglong-dispatcher --profile edge --database sqlite:///var/qinglong.db run

lint: $(STAMP)
	$(BIN)/ruff check qinglong_dispatcher tests examples
	$(BIN)/ruff format --check qinglong_dispatcher tests examples
	$(BIN)/lint-imports

# Rewrites files: the fixes ruff can make safely, then the formatter (last, so that fixed
# code is formatted too). `make lint` checks both.
format: $(STAMP)
	$(BIN)/ruff check --fix qinglong_dispatcher tests examples
	$(BIN)/ruff format qinglong_dispatcher tests examples

typecheck: $(STAMP)
	$(BIN)/mypy

# `make test` leaves out the tests marked slow (failover, SIGKILLs, the edge device under its
# limits, 200,000 dispatches, the random state machine, the bench); `make test-slow` runs
# them, and CI (.ci/run) runs both.
pytest: $(STAMP)
	$(BIN)/pytest -m "not slow"

test: lint typecheck pytest

test-slow: $(STAMP)
	$(BIN)/pytest -m slow

BENCH_PG_URL ?= $(or $(QINGLONG_BENCH_PG_URL),postgresql://postgres@127.0.0.1:5432/postgres)

bench: $(RUNTIME_STAMP)
	$(BIN)/qinglong-dispatcher bench --profile edge
	$(BIN)/qinglong-dispatcher bench --profile cluster --database $(BENCH_PG_URL)

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
