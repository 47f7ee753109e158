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


# xdist (`--dist loadfile`) hands test files out in collection order. The files with multi-process, vLLM or
# other slow tests go first, so that no worker is left running a long launch after the other has finished
# (longest jobs first); the order inside a file, and among files of one kind, is kept.
_LONG_FIRST = ("distributed", "vllm", "slow")


def pytest_configure(config: pytest.Config) -> None:
    # xdist's default (--loadscope-reorder) re-sorts the files by their number of tests, which put the few-test
    # multi-process files (test_worlds, test_multinode) last of ~130: keep the order set below instead.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank: dict[str, int] = {}
    for item in items:
        kind = next((i for i, m in enumerate(_LONG_FIRST) if item.get_closest_marker(m)), len(_LONG_FIRST))
        path = item.nodeid.split("::")[0]
        rank[path] = min(rank.get(path, kind), kind)
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])
