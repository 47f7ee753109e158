"""Shared test set-up.

Caches go to the project cache folder (tiny checkpoints are built once and reused across runs and CI jobs);
threads are pinned to 1 for stable timings on the 2-core CI machine.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from pathlib import Path

import pytest

from corl_vl.paths import configure_cache_env

configure_cache_env()

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def tiny_checkpoint():
    """Factory: ``tiny_checkpoint("tiny-qwen2.5-vl")`` → path of the cached tiny checkpoint (built on first use)."""
    from model_adapters.tiny import ensure_tiny

    return ensure_tiny


@pytest.fixture(scope="session")
def demo_bases():
    """The demo's warm-started bases (``corl_vl.demo_config()``), built once and cached."""
    from corl_vl.experiment import demo_config, ensure_bases

    return ensure_bases(demo_config(), log_every=0)
