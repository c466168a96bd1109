# Two entry points for a fresh machine: `make demo` and `make test` (see README).
VENV ?= .venv
BIN := $(VENV)/bin
PYTHON ?= python3

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

.PHONY: setup demo test lint
setup: $(BIN)/.installed

demo: setup
	bash scripts/demo.sh

lint: setup
	$(BIN)/ruff check src tests benchmarks scripts examples

test: setup lint
	$(BIN)/pytest -q
