# Two entry points that work on a fresh machine: `make demo` and `make test`.
# Everything installs into .venv from the project's own files.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Every install goes through the constraints file: it pins torch to the CPU wheel on this
# machine's disk. pyproject.toml only asks for a range (users keep their image's torch),
# and an open range with no torch installed makes pip fetch a multi-GB CUDA build.
CONSTRAINTS := constraints.txt
PIP_INSTALL := $(BIN)/pip install --quiet -c $(CONSTRAINTS)
STAMP_RUNTIME := $(VENV)/.installed-runtime
STAMP_TEST    := $(VENV)/.installed-test
STAMP_LAUNCH  := $(VENV)/.installed-launch

.PHONY: demo test lint typecheck bench clean cluster cluster-down cluster-launcher

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip setuptools wheel

$(STAMP_RUNTIME): pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(PIP_INSTALL) -e .
	touch $@

$(STAMP_TEST): pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(PIP_INSTALL) -e '.[test]'
	touch $@ $(STAMP_RUNTIME)

# `elastic-compile run` starts elastic-launch in every local pod, so the demo needs torch.
$(STAMP_LAUNCH): pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(PIP_INSTALL) -e '.[launch]'
	touch $@ $(STAMP_RUNTIME)

demo: $(STAMP_LAUNCH)
	@echo "== elastic-compile examples/ddp-2x8-gpu.yaml"
	$(BIN)/elastic-compile examples/ddp-2x8-gpu.yaml
	@echo "== where every value came from"
	$(BIN)/elastic-compile examples/ddp-2x8-gpu.yaml --explain
	@echo "== the tiny CPU example, run here as the cluster would: 2 pods x 2 workers"
	$(BIN)/elastic-compile run examples/cpu-ddp.yaml --timeout 300
	@echo "== the commands are in $(VENV)/bin; to run them by name in this shell:"
	@echo "   source $(VENV)/bin/activate    (or: export PATH=\"$$PWD/$(VENV)/bin:\$$PATH\")"

lint: $(STAMP_TEST)
	$(BIN)/ruff check elastic_compile tests bench
	$(BIN)/ruff format --check elastic_compile tests bench
	@if command -v go >/dev/null 2>&1; then \
	  echo "gofmt -l cluster/launcher && go vet (cluster/launcher)"; \
	  test -z "$$(gofmt -l cluster/launcher)" || { gofmt -l cluster/launcher; exit 1; }; \
	  go -C cluster/launcher vet ./...; \
	fi

typecheck: $(STAMP_TEST)
	$(BIN)/mypy

test: $(STAMP_TEST) lint typecheck
	@command -v go >/dev/null 2>&1 || echo "make test: Go is not on PATH, so the real-cluster tests (tests/realcluster) skip: see docs/development.md"
	$(BIN)/pytest -q

bench: $(STAMP_TEST)
	$(BIN)/python bench/compile_bench.py

# The real control plane the tests run against (docs/development.md, "The real control plane"):
# etcd, kube-apiserver, kube-controller-manager, training-operator, Trainer and JobSet, each
# built from its Go module at the release cluster/versions.yaml pins, on 127.0.0.1. The last
# line `make cluster` prints is `export KUBECONFIG=...`; `make cluster-down` stops it all.
CLUSTER_DIR ?= $(or $(ELASTIC_COMPILE_CLUSTER_DIR),.cluster)
CLUSTER_LAUNCHER := $(CLUSTER_DIR)/bin/cluster-launcher

cluster-launcher:
	@go -C cluster/launcher build -trimpath -o $(abspath $(CLUSTER_LAUNCHER)) .

cluster: cluster-launcher
	@$(CLUSTER_LAUNCHER) -root cluster -state $(CLUSTER_DIR) up

cluster-down:
	@if [ -x $(CLUSTER_LAUNCHER) ]; then $(CLUSTER_LAUNCHER) -root cluster -state $(CLUSTER_DIR) down; \
	else echo "no $(CLUSTER_LAUNCHER): no cluster was started from $(CLUSTER_DIR)"; fi

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
