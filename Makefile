# gpu-finops — the two commands a new user runs are `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CODE   := exporter costsvc kube demo
LINTED := $(wildcard exporter costsvc kube demo tests bench migrations scripts dashboards deploy/*.py)

.PHONY: demo test lint typecheck pytest sysdeps bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip >/dev/null
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

sysdeps:
	scripts/ensure-system-deps.sh

test: $(STAMP) sysdeps lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP) sysdeps
	$(BIN)/pytest

demo: $(STAMP)  # options as ARGS="--api-port 8081 ..." (python -m demo --help lists them)
	scripts/ensure-system-deps.sh --demo
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m demo $(ARGS)

bench: $(STAMP)
	scripts/ensure-system-deps.sh --bench
	$(BIN)/python bench/exporter_scrape.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache *.egg-info
