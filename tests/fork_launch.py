"""Launch a test worker script on N local ranks, forked from one process that has already imported the stack.

Why: a torchrun worker spends ~6.5 s of its ~8 s of CPU importing torch, transformers and DeepSpeed, and the
multi-process tests start ~40 of them: a third of the suite's CPU on the 2-core CI machine. Here a
``multiprocessing`` fork server imports that stack once per pytest process, and every rank is a fork of it. A
rank still is a process of its own, with its own rendezvous and gloo world, under torchrun's environment contract
(RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT, GROUP_RANK …) and its agent store: the rendezvous store lives
in the launcher, as in torchrun's agent, so rank 0 ending first does not take it away from the others. Like
torchrun, the first rank that fails stops the others, and a hang ends in SIGTERM (the workers' faulthandler
prints their stacks), then SIGKILL.

The tests about launching itself (the documented ``torchrun`` command, multi-node rendezvous, signals, the GPU
validation's torchrun check) keep real ``torchrun`` (tests/torchrun_launch.py).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import runpy
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from torchrun_launch import free_port

# What the workers import anyway. The fork server only imports (it runs no torch op), so it holds no thread or
# OpenMP pool a fork could break; a module missing here is imported by the rank itself.
PRELOAD = [
    "torch",
    "torch.distributed",
    "transformers",
    "transformers.models.qwen2.modeling_qwen2",
    "transformers.models.llama.modeling_llama",
    "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl",
    "deepspeed",
    "peft",
    "model_adapters.builtins",
    "corl_vl.recipe",
    "corl_vl.train.cohort",
]
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(PRELOAD)


@dataclass
class Launched:
    """What ``subprocess.run`` would return: the first failing rank's exit code (0: all ranks ended well)."""

    returncode: int
    stdout: str
    stderr: str


def _rank_main(script: str, args: list[str], env: dict[str, str], out: str, err: str) -> None:
    """One rank: torchrun's environment, stdout/stderr to files, the script run as ``__main__``."""
    os.setsid()  # the rank and anything it starts form one group the launcher can stop
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    os.environ.clear()
    os.environ.update(env)
    import torch

    torch.set_num_threads(int(env.get("OMP_NUM_THREADS", "1")))  # OpenMP read its variable in the fork server
    sys.argv = [script, *args]
    sys.path[0] = str(Path(script).parent)
    runpy.run_path(script, run_name="__main__")


def _rank_env(env: dict[str, str], rank: int, nproc: int, port: int) -> dict[str, str]:
    return {
        **env,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": "0",
        "GROUP_WORLD_SIZE": "1",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(nproc),
        "ROLE_NAME": "default",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": "none",
        "TORCHELASTIC_USE_AGENT_STORE": "True",  # env:// then joins the launcher's store (torchrun's agent store)
        "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),
    }


def _stop(ranks: list[multiprocessing.process.BaseProcess], grace: float) -> None:
    """SIGTERM to every live rank's group, then SIGKILL after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        for rank in ranks:
            if rank.exitcode is None and rank.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(rank.pid, sig)
        deadline = time.monotonic() + wait
        for rank in ranks:
            rank.join(max(0.0, deadline - time.monotonic()))


def fork_launch(
    script: str | Path,
    *args: str,
    env: dict[str, str],
    nproc: int = 2,
    timeout: float = 600,
    logs: Path,
    grace: float = 15.0,
) -> Launched:
    """Run ``script args`` on ``nproc`` ranks; their output goes to ``logs/rank-<r>.{out,err}`` and is returned.
    A hang past ``timeout`` raises TimeoutError after the ranks were stopped (SIGTERM, which makes the workers'
    faulthandler print their stacks into stderr, then SIGKILL ``grace`` seconds later)."""
    import torch.distributed as dist

    logs.mkdir(parents=True, exist_ok=True)
    store = dist.TCPStore("127.0.0.1", free_port(), is_master=True, wait_for_workers=False)
    try:
        return _run_ranks(str(script), list(args), env, nproc, (timeout, grace), logs, store.port)
    finally:
        del store


def _run_ranks(
    script: str,
    args: list[str],
    env: dict[str, str],
    nproc: int,
    limits: tuple[float, float],
    logs: Path,
    port: int,
) -> Launched:
    timeout, grace = limits
    files = [(logs / f"rank-{r}.out", logs / f"rank-{r}.err") for r in range(nproc)]
    ranks = [
        _CONTEXT.Process(
            target=_rank_main,
            args=(script, args, _rank_env(env, r, nproc, port), str(o), str(e)),
            name=f"rank-{r}",
        )
        for r, (o, e) in enumerate(files)
    ]
    for rank in ranks:
        rank.start()
    deadline, hung = time.monotonic() + timeout, False
    while any(r.exitcode is None for r in ranks):
        if any(r.exitcode for r in ranks):  # a rank failed: the others would wait for it forever
            _stop(ranks, grace)
            break
        if time.monotonic() > deadline:
            hung = True
            _stop(ranks, grace)
            break
        time.sleep(0.05)
    stdout = "".join(o.read_text(errors="replace") for o, _ in files if o.exists())
    stderr = "".join(e.read_text(errors="replace") for _, e in files if e.exists())
    if hung:
        raise TimeoutError(f"{nproc}-rank run of {Path(script).name} hung for {timeout} s:\n{stderr[-8000:]}")
    codes = [r.exitcode for r in ranks]
    return Launched(next((c for c in codes if c), 0), stdout, stderr)
