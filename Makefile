# The project's entry points. `make test` is what CI runs (.ci/run calls exactly that).
# Every target creates the virtualenv from pyproject.toml first, so a fresh clone needs
# only Python 3.11 and network access to the package index.

PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml simulator/pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: venv test lint typecheck unit e2e substrate image cluster-up cluster-down analyze demo bench scale-bench docs clean

venv: $(STAMP)

$(STAMP): pyproject.toml simulator/pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; set PYTHON=/path/to/python3.11" >&2; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -e './simulator[plot]'
	rm -f $(VENV)/.installed-*
	touch $@

## lint: import contracts (the layers; the pure core does no I/O), ruff
lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/ruff check operator simulator tests e2e conftest.py docs

## typecheck: mypy --strict over the whole package
typecheck: $(STAMP)
	$(BIN)/mypy

## unit: every test that needs no cluster
unit: $(STAMP)
	$(BIN)/pytest

## substrate: build (first time: about 20 minutes on 2 cores) or find the e2e binaries
substrate:
	bash e2e/cluster/build.sh

## image: build (cold: about 3 minutes on 2 cores) or find the operator image, an OCI archive
## under ~/.cache/slascaler/image/ (buildah on a Debian base, no Docker engine; needs root)
image:
	bash operator/image/build.sh

## e2e: the e2e suite on a local control plane and Prometheus (or --kubeconfig, see e2e/kind)
e2e: $(STAMP) substrate image
	$(BIN)/pytest --e2e e2e/tests --durations=15 $(E2E_ARGS)

## cluster-up / cluster-down: the local control plane by hand (prints the KUBECONFIG)
cluster-up: $(STAMP) substrate
	$(BIN)/python -m e2e.cluster up

cluster-down: $(STAMP)
	$(BIN)/python -m e2e.cluster down

## test: everything CI runs
test: lint typecheck unit e2e

## demo: the main job: the Azure conversation trace through a simulated fleet, slascaler vs HPA
demo: $(STAMP)
	$(BIN)/slascaler demo --minutes 60 --plot out/demo.png

## bench: the simulator's speed, then every policy and ablation on every scenario, two seeds;
## writes out/bench/ and regenerates docs/benchmark.md
bench: $(STAMP)
	$(BIN)/slascaler bench --speed
	$(BIN)/slascaler bench --seeds 1,2 --ablations --out out/bench --doc docs/benchmark.md \
	  --summary README.md
	$(BIN)/slascaler bench --pools --seeds 1,2 --doc docs/benchmark.md

## scale-bench: one operator against 100, 300 and 1000 InferenceSLAs on the local control plane
## (about 15 minutes on 2 cores; SCALE_ARGS="--sizes 50,100 --window 30" for a short run)
scale-bench: $(STAMP) substrate
	$(BIN)/python -m e2e.scale_bench $(SCALE_ARGS)

## analyze: TTFT analysis of the bundled per-request samples
analyze: $(STAMP)
	$(BIN)/slascaler analyze examples/samples/high_load.csv
	$(BIN)/slascaler analyze examples/samples/low_load.csv --objective-ms 150

## docs: regenerate docs/reference.md from the CRDs in manifests/crds/ (a unit test checks it)
docs: $(STAMP)
	$(BIN)/python docs/gen_reference.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
