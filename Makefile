# Two commands for a fresh machine:
#   make train   -- the default run: MAPPO on VMAS navigation (3 agents), CPU
#   make test    -- the test suite
# Both create .venv from nothing; torch's CPU build is installed first so that
# the project's torch range does not pull a CUDA build.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
TORCH ?= torch==2.13.0
ARGS ?=

.PHONY: venv train test clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e ".[test,cluster]"
	touch $@

train: venv
	$(VENV)/bin/marl-ppo train $(ARGS)

test: venv
	$(PY) -m pytest -q marl_ppo tests

clean:
	rm -rf $(VENV) runs .pytest_cache
