# The two commands a newcomer needs (each creates .venv first if it is missing or stale):
#   make demo   — the main job: a tiny Co-RL cohort on synthetic visual math, on CPU
#   make test   — lint, format check, the test suite, then a random 10 % of the fast tests in random order
#                 (tests must pass alone; scripts/random_tests.py) — what CI runs, via .ci/run
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
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q
	$(PY) scripts/random_tests.py --share 0.1 -- -m "not slow and not distributed and not vllm"

lint: env
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: env
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .
