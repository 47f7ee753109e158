"""The weights' dtype: the names an adapter accepts and ``auto``, resolved once the device is known.

Why ``auto`` is the default: bf16 is what GPU trainers run (fp32 doubles the memory and refuses the headline pair
on one 80 GB GPU), while the CPU has no fast bf16 matmuls, so the CPU tests and demo stay in fp32.
"""

from __future__ import annotations

from corl_vl.errors import CorlError

DTYPES = ("float32", "bfloat16", "float16")
AUTO_DTYPE = "auto"  # bf16 on a CUDA device, fp32 elsewhere (resolve_dtype)


def resolve_dtype(dtype: str, device: str) -> str:
    """The weights' dtype on ``device``: ``auto`` is bf16 on CUDA, fp32 elsewhere; any other name is kept."""
    if dtype != AUTO_DTYPE:
        return dtype
    return "bfloat16" if str(device).startswith("cuda") else "float32"


def check_dtype(dtype: str, owner: str) -> str:
    """``dtype`` if an adapter accepts it, else one error naming ``owner`` and the known names."""
    if dtype not in (AUTO_DTYPE, *DTYPES):
        raise CorlError(f"{owner}: unknown dtype '{dtype}'; known: {', '.join((AUTO_DTYPE, *DTYPES))}")
    return dtype
