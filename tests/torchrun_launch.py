"""The torchrun command the multi-process tests launch their workers with (gloo, one node, a free port)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(worker: str | Path, *args: str, nproc: int = 2) -> list[str]:
    """``python -m torch.distributed.run`` of ``worker`` (a script, or ``-m``) on ``nproc`` local processes."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--nnodes=1",
        f"--master_port={free_port()}",
        str(worker),
        *args,
    ]


def exit_without_teardown() -> None:
    """End a worker whose results are written and closed: skips the interpreter's teardown of torch,
    transformers, DeepSpeed and vLLM (3-5 s of C-level finalisation per process on a loaded 2-core machine)."""
    import logging
    import os

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
