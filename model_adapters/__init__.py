"""Everything model-family-specific in corl-vl: the adapter interface, the registry, presets, tiny checkpoints.

Code outside this package talks to models only through :class:`ModelAdapter` obtained from
:func:`create_adapter` (a preset name, a local folder, or a hub id with an adapter name). Importing this package
is cheap: torch and transformers load only when an adapter does real work.
"""

from .base import (
    ANSWER_INSTRUCTIONS,
    CompletionLogprobs,
    ImageOptions,
    ModelAdapter,
    PromptInputs,
    TrainingBatch,
    format_question,
)
from .registry import (
    ENTRY_POINT_GROUP,
    adapter_origin,
    create_adapter,
    detect_adapter,
    get_adapter_class,
    list_adapters,
    register_adapter,
    reload_plugins,
    resolve_model,
)

__all__ = [
    "ANSWER_INSTRUCTIONS",
    "ENTRY_POINT_GROUP",
    "CompletionLogprobs",
    "ImageOptions",
    "ModelAdapter",
    "PromptInputs",
    "TrainingBatch",
    "adapter_origin",
    "create_adapter",
    "detect_adapter",
    "format_question",
    "get_adapter_class",
    "list_adapters",
    "register_adapter",
    "reload_plugins",
    "resolve_model",
]
