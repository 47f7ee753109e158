"""SmolVLM for corl-vl, as an outside package: the adapter (registered through the ``corl_vl.adapters`` entry
point) and a tiny randomly initialised SmolVLM checkpoint for tests and CPU smoke runs."""

from .adapter import SmolVLMAdapter
from .tiny import ensure_tiny_smolvlm

__all__ = ["SmolVLMAdapter", "ensure_tiny_smolvlm"]
