# The project's entry points. `make test` is what CI runs (.ci/run calls exactly that).
# Every target creates the virtualenv from pyproject.toml first, so a fresh clone needs
# only Python 3.11 and network access to the package index.

PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: venv test lint typecheck unit analyze clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; set PYTHON=/path/to/python3.11" >&2; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

## lint: import contract (pure core does no I/O), ruff
lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/ruff check operator tests

## typecheck: mypy --strict over the whole package
typecheck: $(STAMP)
	$(BIN)/mypy

## unit: every test that needs no cluster
unit: $(STAMP)
	$(BIN)/pytest

## test: everything CI runs
test: lint typecheck unit

## analyze: the main job until the demo lands: TTFT analysis of a bundled sample
analyze: $(STAMP)
	$(BIN)/slascaler analyze examples/samples/high_load.csv
	$(BIN)/slascaler analyze examples/samples/low_load.csv --objective-ms 150

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
