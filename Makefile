# The two commands a newcomer needs (each creates .venv first if it is missing or stale):
#   make demo   — the main job: a tiny Co-RL cohort on synthetic visual math, on CPU
#   make test   — lint, format check, the test suite (2 xdist workers, TEST_WORKERS=N for more; a test file per
#                 worker: xdist's loadfile keeps each file's fixtures built once), then a random 10 % of the fast tests in random order
#                 (tests must pass alone; scripts/random_tests.py) — what CI runs, via .ci/run
VENV ?= .venv
PY := $(VENV)/bin/python
export OMP_NUM_THREADS ?= 1
TEST_WORKERS ?= 2  # pytest-xdist workers (make test TEST_WORKERS=8 on a bigger machine)
export TOKENIZERS_PARALLELISM ?= false

.PHONY: env demo test lint format

env:
	@bash scripts/install.sh

demo: env
	$(VENV)/bin/corl-vl demo

test: env
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile
	$(PY) scripts/random_tests.py --share 0.1 --workers $(TEST_WORKERS) -- -m "not slow and not distributed and not vllm"

lint: env
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: env
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .
