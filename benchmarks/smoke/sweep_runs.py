"""One smoke run and what it measured: a training run in this process, or a command in a subprocess.

Why in-process for training: importing torch and transformers costs more than a tiny training step, so a
worker process runs many configs through :func:`corl_vl.recipe.train`, each in its own output folder.
A run's record says what a user would see: exit code, seconds, rows trained, whether every agent's weights
moved, the first error line and the warnings logged; :func:`verdict` turns that into one word.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 900  # seconds a subprocess may run (vLLM start-up on a shared CPU is slow)


class _Warnings(logging.Handler):
    """corl-vl's warnings during a run (a run that trains nothing must say so)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage().splitlines()[0])


def _snapshot(model: Any) -> dict[str, Any]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _moved(before: dict[str, Any], model: Any) -> bool:
    import torch

    after = dict(model.named_parameters())
    return any(not torch.equal(t, after[n].detach().to(t.device)) for n, t in before.items() if n in after)


@contextlib.contextmanager
def model_loads() -> Iterator[list[str]]:
    """The models loaded in this process meanwhile (``ModelAdapter.load_model`` calls). Why not the trainer's
    ready hook: a refusal raised while the agents are built (``train.freeze``, LoRA) comes after the weights
    loaded but before that hook, and must not count as decided from the config."""
    from model_adapters.base import ModelAdapter

    loads: list[str] = []
    original = ModelAdapter.load_model

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        loads.append(str(self.model_path))
        return original(self, *args, **kwargs)

    ModelAdapter.load_model = counted  # type: ignore[method-assign]
    try:
        yield loads
    finally:
        ModelAdapter.load_model = original  # type: ignore[method-assign]


def train_in_process(overrides: list[str]) -> dict[str, Any]:
    """``corl_vl.recipe.train`` on the demo cohort with ``overrides``; never raises."""
    from corl_vl.errors import CorlError
    from corl_vl.experiment import demo_config
    from corl_vl.recipe import train

    warnings = _Warnings()
    logger = logging.getLogger("corl_vl")
    logger.addHandler(warnings)
    before: dict[str, dict[str, Any]] = {}
    record: dict[str, Any] = {"rc": 0, "error": "", "stage": ""}
    start = time.perf_counter()
    loads: list[str] = []
    try:
        cfg = demo_config(overrides)
        with model_loads() as loads:
            run = train(
                cfg,
                progress=False,
                prepare=lambda c: before.update({a.name: _snapshot(a.model) for a in c.agents}),
            )
        rows = {n: sum(r.get("trained_rows", 0.0) for r in h) for n, h in run.history.items()}
        record["rows"] = rows
        record["tied"] = {n: no_gradient(h) for n, h in run.history.items()}
        record["changed"] = {a.name: _moved(before[a.name], a.model) for a in run.cohort.agents}
    except CorlError as err:
        record.update(rc=2, error=str(err).splitlines()[0])
    except Exception as err:
        last = traceback.format_exception_only(type(err), err)[-1].strip()
        record.update(rc=1, error=last.splitlines()[0], traceback=True)
    finally:
        logger.removeHandler(warnings)
    record["stage"] = "after models load" if before or loads else "before models load"
    record["seconds"] = round(time.perf_counter() - start, 1)
    record["warnings"] = warnings.lines[:3]
    return record


def no_gradient(steps: list[dict[str, Any]]) -> bool:
    """Every step had zero gradient by arithmetic: each group's rewards were equal (advantages 0) and the
    policy still equalled its KL reference (KL 0, so its gradient is 0 too). With ``grpo.beta > 0`` such rows
    still count as trained, yet the weights cannot move: not a fault."""
    return bool(steps) and all(
        float(r.get("groups/zero_std_frac", 0.0)) == 1.0 and float(r.get("kl", 0.0)) == 0.0 for r in steps
    )


def run_command(argv: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> dict[str, Any]:
    """``python -m corl_vl ARGV``, or a ``torchrun …`` launch."""
    if argv[0] == "torchrun":  # the launcher of the same interpreter, on a free port
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=1",
            f"--master_port={_free_port()}",
            *argv[1:],
        ]
    else:
        cmd = [sys.executable, "-m", "corl_vl", *argv]
    start = time.perf_counter()
    try:
        done = subprocess.run(
            cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=TIMEOUT
        )
        rc, err, out = done.returncode, done.stderr, done.stdout
    except subprocess.TimeoutExpired as timeout:
        rc, err, out = 124, f"timed out after {TIMEOUT} s\n{timeout.stderr or ''}", ""
    lines = [line for line in err.splitlines() if line.strip() and not _noise(line)]
    errors = [line for line in lines if "error" in line.lower() or line.startswith("Traceback")]
    first = errors[0] if errors else (lines[-1] if rc and lines else "")
    if rc and not first:  # a report on stdout (e.g. a check that found problems): its first failure line
        shown = [line.strip() for line in (out or "").splitlines() if line.strip()]
        first = next(
            (line for line in shown if "FAIL" in line or "error" in line.lower()), shown[-1] if shown else ""
        )
    if "Traceback (most recent call last)" in err:
        first = exception_line(err) or first
    return {
        "rc": rc,
        "seconds": round(time.perf_counter() - start, 1),
        "error": first[:300],
        "traceback": "Traceback (most recent call last)" in err,
        "warnings": [line for line in lines if "warning:" in line][:3],
        "tail": "\n".join(lines[-12:]) if rc else "",  # where a failure is read in full
    }


_RAISED = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b")


_LAUNCHER = "torch.distributed.elastic"  # torchrun's own report that a rank failed: the rank's line says why


def exception_line(err: str) -> str:
    """The exception a traceback ended in (``KeyError: 'x'``), the first one when several processes crashed:
    the first unindented line after a ``Traceback`` header that names an exception type (log lines printed
    between the frames do not); else a rank's one-line ``… error: …`` under torchrun's own traceback."""
    after = False
    for line in err.splitlines():
        if line.startswith("Traceback (most recent call last)"):
            after = True
        elif after and _RAISED.match(line) and not _noise(line) and not line.startswith(_LAUNCHER):
            return line
    return next((line for line in err.splitlines() if ": error: " in line), "")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _noise(line: str) -> bool:
    """Third-party chatter on stderr that is not the command's own output (progress bars, accelerator note)."""
    return any(
        mark in line for mark in ("it/s]", "s/it]", "real_accelerator.py", "Loading weights", "Writing model")
    )


def trained_from_folder(run_dir: Path, bases: dict[str, Path]) -> dict[str, Any]:
    """Rows and weight change of a run a subprocess wrote: metrics.jsonl, and the latest checkpoint against
    the agent's base weights."""
    from safetensors import safe_open

    rows: dict[str, float] = {}
    changed: dict[str, bool] = {}
    tied: dict[str, bool] = {}
    for metrics in sorted((run_dir / "agents").glob("*/metrics.jsonl")):
        name = metrics.parent.name
        lines = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        rows[name] = sum(float(r.get("trained_rows", 0.0)) for r in lines)
        tied[name] = no_gradient(lines)
        saved = sorted((run_dir / "checkpoints" / "latest" / name).glob("*.safetensors"))
        base = sorted(Path(bases.get(name, "")).glob("*.safetensors")) if name in bases else []
        if saved and base:
            with safe_open(saved[0], "pt") as new, safe_open(base[0], "pt") as old:
                common = sorted(set(new.keys()) & set(old.keys()))
                changed[name] = any(not new.get_tensor(k).equal(old.get_tensor(k)) for k in common)
    return {"rows": rows, "changed": changed, "tied": tied}


def verdict(record: dict[str, Any], trains: bool) -> str:
    """ok | refused | nothing-trained (warned) | FAIL: … — the table's status column. An agent whose weights
    stayed put counts against the run only when it had a gradient to follow (see :func:`no_gradient`)."""
    if record.get("skip"):
        return "not run"
    if record.get("traceback"):
        return "FAIL: traceback"
    rc = record["rc"]
    if rc == 2:
        return "FAIL: refused after models load" if record.get("stage") == "after models load" else "refused"
    if rc != 0:
        return f"FAIL: exit {rc}"
    if not trains:
        return "ok"
    rows, changed, tied = record.get("rows") or {}, record.get("changed") or {}, record.get("tied") or {}
    if sum(rows.values()) > 0:
        stuck = [n for n, r in rows.items() if r > 0 and changed.get(n) is False and not tied.get(n)]
        if stuck:
            return f"FAIL: {', '.join(stuck)} trained rows, weights unchanged"
        if any(changed.values()) or not changed:
            return "ok"
        # every agent's rows had a zero gradient: the run trained nothing, as one with no rows
    if record.get("warnings"):
        return "nothing trained (warned)"
    return "FAIL: nothing trained, no warning"


def run_pool(
    cases: list[dict[str, Any]],
    execute: Callable[..., dict[str, Any]],
    extra: tuple[Any, ...],
    workers: int,
    on_done: Callable[[dict[str, Any], dict[str, Any], float], None],
) -> None:
    """``execute(case, *extra)`` for every case in ``workers`` spawned processes; ``on_done(case, row, seconds)``
    as each finishes (a worker that died is a FAIL row, not an exception)."""
    start = time.time()
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        pending = {pool.submit(execute, case, *extra): case for case in cases}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                case = pending.pop(future)
                try:
                    row = future.result()
                except Exception as err:
                    row = {"status": "FAIL: worker died", "rc": -1, "error": repr(err)[:300]}
                on_done(case, row, time.time() - start)
