# The two commands a newcomer needs (each creates .venv first if it is missing or stale):
#   make demo   — the main job: a tiny Co-RL cohort on synthetic visual math, on CPU
#   make test   — lint + the test suite (what CI runs, via .ci/run)
VENV ?= .venv
PY := $(VENV)/bin/python
export OMP_NUM_THREADS ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: env demo test lint format

env:
	@bash scripts/install.sh

demo: env
	$(VENV)/bin/corl-vl demo

test: env
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

lint: env
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: env
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .
