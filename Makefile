# Two entry points that work on a fresh machine: `make demo` and `make test`.
# Everything installs into .venv from the project's own files.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP_RUNTIME := $(VENV)/.installed-runtime
STAMP_TEST    := $(VENV)/.installed-test
STAMP_LAUNCH  := $(VENV)/.installed-launch

.PHONY: demo test lint typecheck bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip setuptools wheel

$(STAMP_RUNTIME): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

# The test extra pins torch==2.13.0: the CPU wheel on this machine's disk. Never ask for an
# unpinned torch here; pip would fetch a multi-GB CUDA build.
$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@ $(STAMP_RUNTIME)

# The launch extra is torch==2.13.0, pinned like the test extra (the CPU wheel on this
# machine's disk): `elastic-compile run` starts elastic-launch in every local pod.
$(STAMP_LAUNCH): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[launch]'
	touch $@ $(STAMP_RUNTIME)

demo: $(STAMP_LAUNCH)
	@echo "== elastic-compile examples/ddp-2x8-gpu.yaml"
	$(BIN)/elastic-compile examples/ddp-2x8-gpu.yaml
	@echo "== where every value came from"
	$(BIN)/elastic-compile examples/ddp-2x8-gpu.yaml --explain
	@echo "== the tiny CPU example, run here as the cluster would: 2 pods x 2 workers (about 15 s)"
	$(BIN)/elastic-compile run examples/cpu-ddp.yaml --timeout 300

lint: $(STAMP_TEST)
	$(BIN)/ruff check elastic_compile tests bench
	$(BIN)/ruff format --check elastic_compile tests bench

typecheck: $(STAMP_TEST)
	$(BIN)/mypy

test: $(STAMP_TEST) lint typecheck
	$(BIN)/pytest -q

bench: $(STAMP_TEST)
	$(BIN)/python bench/compile_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
