# Two commands for a fresh machine:
#   make train   -- the default run: MAPPO on VMAS navigation (3 agents), CPU
#   make test    -- the test suite
# Both create .venv from nothing. torch is installed first, as $(TORCH): by default the CPU build
# torch==2.13.0 (from the index pip is configured with; on PyPI itself, pass
# TORCH_INDEX=https://download.pytorch.org/whl/cpu to be sure of the CPU build), so that the
# project's torch range does not pull a CUDA build. For a CUDA build:
#   make train TORCH_INDEX=https://download.pytorch.org/whl/cu128
# `make train` installs marl_ppo alone (no extras); `make test` adds the test extra (loggers,
# cluster, docs and the test tools).
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
ARGS ?=

.PHONY: venv venv-test train test clean

venv: $(VENV)/.installed

venv-test: $(VENV)/.installed-test

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PIP) install -q -e .
	touch $@

# InstaDeep's marl-eval, which tests/suite compares the suite report with: 0.0.4 pins pandas 1.4.4 (no wheel for
# Python 3.11), so it goes in without its pins, beside the test extra's pandas<3, rliable, seaborn and colorcet.
$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) install -q -e ".[test]"
	$(PIP) install -q --no-deps id-marl-eval==0.0.4
	touch $@

train: venv
	$(VENV)/bin/marl-ppo train $(ARGS)

test: venv-test
	$(PY) -m pytest -q --durations=25 marl_ppo tests

clean:
	rm -rf $(VENV) runs .pytest_cache
