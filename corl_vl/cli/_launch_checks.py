"""What ``corl-vl launch`` refuses before it writes a command or a script (one line each, nothing written).

Why a separate module: the launcher turns user values into shell text that a cluster runs. Every value is quoted
(:func:`shlex.quote`), but a quoted word cannot carry a newline into a ``#`` comment safely, and a NUL or carriage
return is never meant; so control characters are refused outright, naming the option or field. The sizes (port,
nodes, GPUs per node, ranks per agent) are checked in O(agents), before any per-GPU list is built.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

from corl_vl.errors import CorlError

#: More nodes than this is no cohort corl-vl plans (every node must run some agent's ranks); the bound keeps the
#: placement (quadratic in nodes) under a second.
MAX_NODES = 1024
#: GPUs one node may offer; the largest machines sold hold 8–16, so 64 leaves room without allowing 10⁹.
MAX_GPUS_PER_NODE = 64


def control_character(value: str) -> str | None:
    """The first control character in ``value`` as ``U+XXXX`` (newline, NUL, CR, DEL, line separators)."""
    for ch in value:
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
            return f"U+{ord(ch):04X}"
    return None


def check_script_values(values: Iterable[tuple[str, str]]) -> None:
    """Refuse a value with a control character: in a shell script a newline starts a new command."""
    for field, value in values:
        bad = control_character(value)
        if bad is not None:
            raise CorlError(
                f"{field}: {value[:60]!r} contains a control character ({bad}); the generated shell script "
                "would split or run it, so remove it (names and paths in a launch must be one line of text)"
            )


def check_sizes(nodes: int, gpus_per_node: int, master_port: int) -> None:
    """Port and machine sizes that any launch can use, refused before any placement work."""
    if not 1 <= master_port <= 65535:
        raise CorlError(f"--master-port {master_port}: a TCP port is 1..65535; pick a free port on node 0")
    if nodes < 1 or gpus_per_node < 1:
        raise CorlError(f"--nodes and --gpus-per-node must be ≥ 1, got {nodes} and {gpus_per_node}")
    if nodes > MAX_NODES:
        raise CorlError(
            f"--nodes {nodes}: more than {MAX_NODES} nodes, and every node must run an agent's ranks; use fewer nodes"
        )
    if gpus_per_node > MAX_GPUS_PER_NODE:
        raise CorlError(
            f"--gpus-per-node {gpus_per_node}: more than {MAX_GPUS_PER_NODE} GPUs in one node; give the GPUs "
            "one node really has"
        )


def check_ranks(names: Sequence[str], counts: Sequence[int], problems_per_step: int) -> None:
    """Each rank of an agent trains on its own share of the step's problems: it needs at least one."""
    for name, count in zip(names, counts):
        if count > problems_per_step:
            raise CorlError(
                f"data.problems_per_step={problems_per_step} is below the {count} ranks of agent {name} (each "
                "rank needs at least one problem per step); raise data.problems_per_step, set agents[i].gpus, "
                "or launch fewer GPUs"
            )


def check_write_target(write: str, config: str) -> None:
    """``--write`` must not replace the config it was made from (same path, a link to it, the same inode)."""
    target, source = Path(write), Path(config)
    same = os.path.abspath(target) == os.path.abspath(source) or target.resolve() == source.resolve()
    if not same and target.exists():
        try:
            same = os.path.samefile(target, source)
        except OSError:
            same = False
    if same:
        raise CorlError(
            f"--write {write}: is the config file this launch reads ({config}); write the script elsewhere, "
            "e.g. --write run.sbatch"
        )
