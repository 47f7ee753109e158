"""The multi-GPU checks behind benchmarks/gpu/validate.py: tests/dist_worker.py under torchrun, one node.

The worker is the one tests/test_multinode.py launches on gloo (real tiny models, their reported text derived
from the sampled ids so labels exist); the backend is the config's ``auto``: NCCL on GPUs, gloo on CPU.

- :func:`uneven_placement`: qwen on 2 GPUs, llama on 1 (ZeRO-3, 3 processes), the smallest cohort whose agents
  have different group sizes: the placement is the one asked for, every rank received the same answers and
  computed the same labels, the reward shares split each agent's problems among its ranks, every rank trained.
- :func:`tp_rollout`: one agent on 2 GPUs with ``rollout.tensor_parallel_size=2`` (vLLM, ``external_launcher``):
  a rollout, an update, a weight sync, a second rollout; both ranks of the TP group sampled the same tokens.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "dist_worker.py"
ZERO3 = ROOT / "configs" / "deepspeed" / "zero3.json"
UNEVEN_GPUS = (2, 1)  # qwen, llama
UNEVEN_ARGS = ("--deepspeed", str(ZERO3), "--gpus", "2,1", "--problems-per-step", "4", "--max-steps", "2")
TP_ARGS = ("--solo", "--tp", "2", "--problems-per-step", "4", "--max-steps", "2")


def worker_command(nproc: int, out: Path, args: tuple[str, ...] | list[str], port: int) -> list[str]:
    """The launch: the same torchrun line ``corl-vl launch`` prints for one node, running the worker."""
    sys.path.insert(0, str(ROOT))
    from corl_vl.cli.launch import torchrun_command

    program = [str(WORKER), str(out), *args]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *torchrun_command([nproc], 0, "127.0.0.1", port, program)[1:],
    ]


def _launch(nproc: int, out: Path, args: list[str], timeout: float) -> str | None:
    """Run the worker on ``nproc`` processes; None when it succeeded, else its error in a few lines."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_EXTENSIONS_DIR": str(out / "ext")}
    cmd = worker_command(nproc, out, args, _free_port())
    code, stdout, stderr = run_session(cmd, env, timeout)
    if code is None:
        return f"timed out after {timeout:.0f} s"
    return None if code == 0 else (stderr or stdout)[-2000:]


def run_session(
    cmd: list[str], env: dict[str, str], timeout: float, cwd: Path | None = None
) -> tuple[int | None, str, str]:
    """``cmd`` in its own session, so a hang is stopped by killing that session only: (exit code, or None after
    ``timeout`` seconds; its stdout; its stderr)."""
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, "", ""
    return proc.returncode, stdout, stderr


def _ranks(out: Path, n: int) -> list[dict[str, Any]]:
    return [json.loads((out / f"rank-{r}.json").read_text())[0] for r in range(n)]


def uneven_placement(timeout: float = 420, out: Path | None = None) -> dict[str, Any]:
    """qwen on ranks 0-1, llama on rank 2: placement, labels and answers equal on every rank, reward shares.

    ``out``: keep the run and the rank records there (tests/test_multinode.py compares a multi-node launch to it).
    """
    import yaml

    with _folder(out, "validate-uneven-") as folder:
        error = _launch(sum(UNEVEN_GPUS), folder, list(UNEVEN_ARGS), timeout)
        if error:
            return {"gpus": list(UNEVEN_GPUS), "ok": False, "error": error}
        placement = yaml.safe_load((folder / "run" / "config.yaml").read_text())["placement"]
        ranks = _ranks(folder, sum(UNEVEN_GPUS))
    return {"gpus": list(UNEVEN_GPUS), **judge_uneven(placement, ranks)}


@contextlib.contextmanager
def _folder(out: Path | None, prefix: str) -> Iterator[Path]:
    """``out`` (created, kept) or a temporary folder removed afterwards."""
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        yield out
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)


def judge_uneven(placement: dict[str, Any], ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The uneven check's verdict from the run's ``placement:`` record and every rank's worker record."""
    placed = placement["agents"] == {"qwen": [0, 1], "llama": [2]} and placement["leftover"] == []
    same_steps = all(r["steps"] == ranks[0]["steps"] for r in ranks)  # answers received and labels
    shares_ok = True
    for step in range(len(ranks[0]["rewards"])):
        for agent in ("qwen", "llama"):
            held = [set(r["rewards"][step][agent]) for r in ranks if r["agent"] == agent]
            union = set().union(*held)
            # each problem's rewards on exactly one of the agent's ranks, the step's 4 problems in all
            shares_ok &= sum(len(h) for h in held) == len(union) == 4
    trained = all(r["changed_tensors"] > r["tensors"] // 2 for r in ranks)
    labelled = any(
        v is not None for step in ranks[0]["steps"] for lab in step["labels"].values() for v in lab.values()
    )
    return {
        "placement": placement["agents"],
        "share_sizes": [len(r["rewards"][0][r["agent"]]) for r in ranks],
        "placement_ok": placed,
        "labels_equal": same_steps,
        "shares_ok": shares_ok,
        "trained": trained,
        "labelled": labelled,
        "steps_logged": len(ranks[0]["steps"]),
        "ok": placed and same_steps and shares_ok and trained and labelled,
    }


def tp_rollout(engine: str = "vllm", timeout: float = 420, out: Path | None = None) -> dict[str, Any]:
    """One agent, a TP group of ranks 0-1: both ranks sample the same tokens before and after a weight sync.

    ``out``: keep the run and the rank records there (tests/test_multinode.py compares them to one process).
    """
    with _folder(out, "validate-tp-") as folder:
        error = _launch(2, folder, [*TP_ARGS, "--engine", engine], timeout)
        if error:
            return {"engine": engine, "ok": False, "error": error}
        ranks = _ranks(folder, 2)
    return {"engine": engine, **judge_tp(ranks, engine)}


def judge_tp(ranks: list[dict[str, Any]], engine: str) -> dict[str, Any]:
    """The TP check's verdict from both ranks' worker records."""
    expected_engine = {"vllm": "VLLMEngine", "hf": "HFEngine"}.get(engine)
    a, b = ranks
    group = a["group_ranks"] == b["group_ranks"] == [0, 1]
    # two rollouts (steps 1 and 2) of the group's whole share, the second after a weight sync
    rollouts = len(a["sampled"]) == len(b["sampled"]) == 2 and all(len(s) == 4 for s in a["sampled"])
    same = a["sampled"] == b["sampled"]
    synced = a["syncs"] >= 1 and b["syncs"] >= 1
    trained = all(r["changed_tensors"] > r["tensors"] // 2 for r in ranks)
    engine_ok = expected_engine is None or a["engine"] == b["engine"] == expected_engine
    return {
        "engine_class": a["engine"],
        "group_ranks": a["group_ranks"],
        "rollouts": len(a["sampled"]),
        "syncs": a["syncs"],
        "same_rollouts": same,
        "ok": group and rollouts and same and synced and trained and engine_ok,
    }


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
