"""``agents[i].lora``: low-rank adapters (peft) instead of every weight, and what they change around the trainer.

Why peft's LoRA injected into the agent's own model: the model stays the family's HF class, so the adapter's
forward, HF generate and the checkpoint code see the same object as in a full fine-tune; only the adapters
(fp32, peft's default beside bf16 weights) require gradients, so the optimizer holds state for them alone.
- rollout engines and ``latest/<agent>`` get the merged weights (:func:`corl_vl.rollout.weights.engine_state_dict`);
- the KL reference (``grpo.beta > 0``) is the same model with its adapters switched off: the base, no second copy;
- a checkpoint keeps the adapters in peft's format under ``state/<agent>/lora/``; resume loads them into the
  freshly built base (which the run never changes), so the adapters come back bit for bit.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError
from corl_vl.train.freeze import freeze_parts

_log = logging.getLogger(__name__)

ADAPTER_FOLDER = "lora"  # inside state/<agent>/
ADAPTER_FILE = "adapter_model.safetensors"  # peft's names: the folder loads with PeftModel.from_pretrained
PEFT_PREFIX = "base_model.model."  # where PeftModel keeps the wrapped model; its saved keys start so


def apply_lora(model: Any, adapter: Any, lora: Any, *, agent: str) -> None:
    """Inject LoRA (``lora``: the config's LoraConfig) into ``model`` in place; every other weight is frozen."""
    # lazy: peft
    import peft

    targets = list(lora.target_modules) or adapter.lora_target_modules(model)
    config = peft.LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets
    )
    try:
        peft.get_peft_model(model, config)
    except ValueError as err:
        first = str(err).strip().splitlines()[0][:200]
        raise CorlError(
            f"agents.{agent}.lora.target_modules: {first} (leave it [] for the family's default)"
        ) from None
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    _log.info(
        "agent %s: LoRA r=%d alpha=%g on %s: %d trainable parameters",
        agent,
        lora.r,
        lora.alpha,
        targets if isinstance(targets, str) else ", ".join(targets),
        trained,
    )


def has_lora(model: Any) -> bool:
    """Whether ``model`` carries peft adapters (injected by :func:`apply_lora`)."""
    return getattr(model, "peft_config", None) is not None and hasattr(model, "named_modules")


@contextlib.contextmanager
def adapters_disabled(model: Any) -> Iterator[None]:
    """``model`` computes its base function (adapters off) inside the block; every ``requires_grad`` flag is
    as before afterwards (peft's switch sets them for all adapters, also frozen ones)."""
    # lazy: peft
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)
        for param, flag in flags:
            param.requires_grad_(flag)


class AdaptersOff:
    """The reference policy of a LoRA agent: its own model, called with the adapters off (the frozen base)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with adapters_disabled(self.model):
            return self.model(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # parameters(), config, get_output_embeddings() … of the model
        return getattr(self.model, name)


def save_adapters(model: Any, folder: Path) -> None:
    """The adapters' tensors and peft config in ``folder`` (peft's file names)."""
    # lazy: peft, safetensors
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    adapters = get_peft_model_state_dict(model).items()
    tensors = {f"{PEFT_PREFIX}{k}": v.detach().contiguous() for k, v in adapters}
    save_file(tensors, str(folder / ADAPTER_FILE))
    model.peft_config["default"].save_pretrained(str(folder))


def load_adapters(model: Any, folder: Path) -> None:
    """The adapters saved by :func:`save_adapters` into ``model``; a missing or mismatched file is one line."""
    # lazy: peft, safetensors
    from peft import set_peft_model_state_dict
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    file = folder / ADAPTER_FILE
    if not file.is_file():
        raise CorlError(
            f"{file}: missing; this checkpoint has no LoRA adapters (saved without agents[i].lora?)"
        )
    try:
        tensors = load_file(str(file))
    except (SafetensorError, OSError) as err:
        raise CorlError(
            f"{file}: cannot be read ({str(err).strip()[:160]}); the checkpoint is damaged"
        ) from None
    expected = {k for k in model.state_dict() if ".lora_" in k}
    try:
        result = set_peft_model_state_dict(
            model, {k.removeprefix(PEFT_PREFIX): v for k, v in tensors.items()}
        )
    except RuntimeError as err:  # shapes differ: another rank or other target modules
        first = str(err).strip().splitlines()[-1].strip()[:160]
        raise CorlError(
            f"{file}: adapters do not fit this agent's LoRA ({first}); same lora settings?"
        ) from None
    missing = sorted(k for k in result.missing_keys if k in expected)
    if missing or result.unexpected_keys:
        what = f"missing {missing[:2]}" if missing else f"unexpected {list(result.unexpected_keys)[:2]}"
        raise CorlError(f"{file}: adapters do not match this agent's LoRA ({what}); same lora settings?")


def prepare_training(
    model: Any, adapter: Any, agent_cfg: Any, *, freeze: Sequence[str], beta: float, device: str
) -> Any:
    """The agent's trainable parts: LoRA (``agents[i].lora``), then ``freeze`` (``train.freeze``); returns the KL
    reference (None when ``beta``, ``grpo.beta``, is 0): the base with adapters off under LoRA, else a frozen second copy."""
    if agent_cfg.lora is not None:
        apply_lora(model, adapter, agent_cfg.lora, agent=agent_cfg.name)
    freeze_parts(model, adapter, freeze, agent=agent_cfg.name)
    if beta <= 0:
        return None
    if agent_cfg.lora is not None:
        return AdaptersOff(model)
    ref = adapter.load_model(device=device)
    ref.requires_grad_(False)
    return ref
