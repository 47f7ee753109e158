"""Which parts of a model can be frozen (``train.freeze``) and where LoRA goes by default (``agents[i].lora``).

Why family hooks: part names (``vision_tower``, ``projector``, ``language_model`` …) are the same words for every
family, but the parameter names behind them are not (``model.visual.merger`` is Qwen's projector,
``model.multi_modal_projector`` InternVL's and Gemma's). The trainer asks the adapter and never reads a
parameter name itself. A parameter belongs to every part whose prefix it starts with, so a family whose
projector sits inside its vision module (Qwen's ``model.visual.merger``) lists the tower's own prefixes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, ClassVar

from corl_vl.errors import CorlError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# the attention and gated-MLP projections of the common HF decoder layer (Llama, Qwen, Gemma, InternVL's LM)
DEFAULT_LORA_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def module_name(model: Any, module: Any) -> str:
    """The dotted name of ``module`` inside ``model`` ("" for the model itself)."""
    for name, candidate in model.named_modules():
        if candidate is module:
            return name
    raise CorlError(f"{type(model).__name__}: module {type(module).__name__} is not part of the model")


class TrainableParts:
    """Mixed into :class:`~model_adapters.base.ModelAdapter`: part names for freezing, LoRA's default targets."""

    # parameter-name prefixes of the vision tower and of the projector into the language model (family hook)
    vision_tower_prefixes: ClassVar[tuple[str, ...]] = ()
    projector_prefixes: ClassVar[tuple[str, ...]] = ()
    # the decoder-layer projections LoRA adapts when ``agents[i].lora.target_modules`` is [] (family hook)
    lora_projections: ClassVar[tuple[str, ...]] = DEFAULT_LORA_PROJECTIONS

    def model_parts(self, model: PreTrainedModel) -> dict[str, tuple[str, ...]]:
        """Family hook: part name → parameter-name prefixes, for ``train.freeze``. Default: the language model
        (``get_decoder()``), its input embeddings, the output head, and the vision tower and projector the
        family declares."""
        decoder = module_name(model, model.get_decoder())
        parts: dict[str, tuple[str, ...]] = {
            "vision_tower": self.vision_tower_prefixes,
            "projector": self.projector_prefixes,
            "language_model": (f"{decoder}." if decoder else "",),
            "embeddings": (f"{module_name(model, model.get_input_embeddings())}.",),
        }
        head = model.get_output_embeddings()
        if head is not None:
            parts["lm_head"] = (f"{module_name(model, head)}.",)
        return {name: prefixes for name, prefixes in parts.items() if prefixes}

    def lora_target_modules(self, model: PreTrainedModel) -> str:
        """Family hook: peft's ``target_modules`` when the config gives none — a pattern of full module names:
        the :attr:`lora_projections` of every language-model layer (never the vision tower's, which shares
        some of those names in Qwen)."""
        decoder = module_name(model, model.get_decoder())
        names = "|".join(re.escape(n) for n in self.lora_projections)
        return rf"{re.escape(decoder)}\.layers\.\d+\.(?:self_attn|mlp)\.(?:{names})"

    def parts_of(self, parts: dict[str, tuple[str, ...]], parameter: str) -> set[str]:
        """The parts ``parameter`` belongs to: every part with a prefix it starts with (``embeddings`` lies
        inside ``language_model``)."""
        return {part for part, prefixes in parts.items() if parameter.startswith(prefixes)}
