"""The one interface the trainer, the rollout engines and the evaluator use to drive any model family.

Why: heterogeneous cohorts are the point of Co-RL, and families differ in prompts, image preprocessing, special
tokens, batch fields, stop tokens and in how rollout logprobs drift from the trainer's. Everything that differs
lives behind :class:`ModelAdapter`; code outside ``model_adapters/`` never checks a model name.

Data flow (one problem):

``Problem`` → :meth:`ModelAdapter.build_messages` (chat messages, one prompt format for training *and* evaluation)
→ :meth:`ModelAdapter.encode_prompt` → :class:`PromptInputs` (the exact, expanded token ids the model sees plus
this prompt's image tensors) → :meth:`ModelAdapter.generation_batch` (HF ``generate``) or
:meth:`ModelAdapter.completion_logprobs` (trainer; differentiable). The same :class:`PromptInputs` also becomes
a vLLM request (:meth:`ModelAdapter.vllm_request`) that yields the *same* prompt tokens as the HF path.

Render once: the chat template runs once per problem, in :meth:`ModelAdapter.encode_prompt`; everything
downstream (HF generate, vLLM, the trainer's logprobs) works from that one :class:`PromptInputs`, so no two
consumers can see different renderings. Templates that read the clock get a pinned date
(:mod:`model_adapters.templates`).

Padding conventions (why two): ``generate`` needs left padding so every row's next token is at the last column;
the trainer forward uses *right* padding, so every real token keeps exactly the positions (1-D or M-RoPE) it had
unpadded, whatever the family computes positions from — no family-specific ``position_ids`` handling needed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from corl_vl.data.problem import ImageLike, Problem
from corl_vl.errors import CorlError

from .chat_templating import ChatTemplating
from .dtypes import AUTO_DTYPE, check_dtype, resolve_dtype  # resolve_dtype: also imported from here
from .images import ImageOptions, image_options_from, load_image, resize_long_side
from .model_facts import MemoryFacts
from .random_init import RandomInit, random_init_record
from .records import CompletionLogprobs, PromptInputs, TrainingBatch
from .scoring import LogprobScoring
from .templates import DEFAULT_TEMPLATE_DATE, parse_template_date, read_prompt_record
from .trainable_parts import TrainableParts
from .vllm_requests import VLLMRequests

if TYPE_CHECKING:  # heavy imports stay lazy: `corl-vl --help` must not import torch
    import torch
    from PIL import Image
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

ANSWER_INSTRUCTIONS: dict[str, str] = {
    # One format for training and evaluation (the VLM release trained with tags but evaluated with \boxed{}).
    "boxed": " Please reason step by step, and put your final answer within \\boxed{}.",
    "answer_tags": (
        " Please reason step by step inside <think> </think> tags, then give your final answer inside"
        " <answer> </answer> tags."
    ),
    "none": "",
}

__all__ = [
    "ANSWER_INSTRUCTIONS",
    "CompletionLogprobs",
    "ImageOptions",
    "ModelAdapter",
    "PromptInputs",
    "TrainingBatch",
    "format_question",
]


def format_question(problem: Problem, answer_format: str = "boxed") -> str:
    """The user-turn text: question, options as ``A. …`` lines, then the answer-format instruction."""
    if answer_format not in ANSWER_INSTRUCTIONS:
        raise CorlError(f"unknown answer_format '{answer_format}'; known: {', '.join(ANSWER_INSTRUCTIONS)}")
    text = problem.question.strip()
    if problem.choices:
        if len(problem.choices) > 26:
            raise CorlError(
                f"problem {problem.id}: {len(problem.choices)} choices; at most 26 (A–Z) supported"
            )
        options = "\n".join(f"{chr(ord('A') + i)}. {c}" for i, c in enumerate(problem.choices))
        text = f"{text}\n{options}"
    return text + ANSWER_INSTRUCTIONS[answer_format]


class ModelAdapter(ChatTemplating, LogprobScoring, VLLMRequests, MemoryFacts, TrainableParts, RandomInit):
    """Everything family-specific about one model: loading, prompts, images, batches, logprobs, vLLM requests.

    Subclasses set the class variables and override the hooks marked "family hook"; the defaults implement a
    chat-template model through ``AutoProcessor``. Register a subclass with
    :func:`model_adapters.registry.register_adapter` (or the ``corl_vl.adapters`` entry-point group).

    Class variables:
        name: registry name (set by ``@register_adapter``).
        model_types: HF ``config.model_type`` values this adapter drives (local-folder auto-detection).
        auto_model_class: ``transformers`` auto class used by :meth:`load_model`.
        supports_images: False for text-only families (a problem with images is then an error).
        importance_ratio_cap: default token-level IS truncation cap (None = off) — a family default because the
            rollout/trainer drift is a family property (Gemma-3 drifts ≈ 0.13 nats/token). On (2.0) unless a
            family declares otherwise: TRL and verl also correct by default; every shipped family keeps it.
        contain_nonfinite_rollout_logprobs: whether NaN/inf rollout logprobs are replaced (True: weight 1,
            counted in ``is/nonfinite_tokens``; an engine reports a missing logprob as NaN) or an error.
        image_token: the placeholder token the processor repeats per image token (None for text families).
        template_image_placeholder: what the chat template writes per image part, if not ``image_token``
            (Gemma-3 writes ``<start_of_image>``, which its processor expands).
        default_template_date: the date templates that read the clock are pinned to (``YYYY-MM-DD``).
    """

    name: ClassVar[str] = ""
    model_types: ClassVar[tuple[str, ...]] = ()
    auto_model_class: ClassVar[str] = "AutoModelForImageTextToText"
    supports_images: ClassVar[bool] = True
    importance_ratio_cap: ClassVar[float | None] = 2.0
    contain_nonfinite_rollout_logprobs: ClassVar[bool] = True
    image_token: ClassVar[str | None] = None
    template_image_placeholder: ClassVar[str | None] = None
    default_template_date: ClassVar[str] = DEFAULT_TEMPLATE_DATE

    def __init__(
        self,
        model_path: str | Path,
        *,
        dtype: str = AUTO_DTYPE,
        attn_implementation: str | None = "sdpa",
        trust_remote_code: bool = False,
        image_options: ImageOptions | dict[str, Any] | None = None,
        answer_format: str = "boxed",
        system_prompt: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        template_date: str | None = None,
        chat_template: str | None = None,
        **family_kwargs: Any,
    ) -> None:
        """Configure (nothing heavy is loaded here).

        Args:
            model_path: hub id or local folder with config, weights, tokenizer/processor files.
            dtype: ``auto`` (:func:`resolve_dtype`: bf16 on CUDA, else fp32) | ``float32`` | ``bfloat16`` | ``float16``.
            attn_implementation: passed to ``from_pretrained`` (``sdpa``, ``eager``, ``flash_attention_2``).
            trust_remote_code: off unless the user asks; the HF-format families never need it.
            image_options: resize policy (long-side cap, min/max pixels); a mapping (YAML) overrides the family
                defaults key by key; family defaults when None.
            answer_format: key of :data:`ANSWER_INSTRUCTIONS`; same for training and evaluation.
            system_prompt: optional system turn.
            chat_template_kwargs: extra variables for the chat template (e.g. ``enable_thinking`` for Qwen3).
            template_date: ``YYYY-MM-DD`` the template's clock is pinned to; None → the date recorded in the
                checkpoint folder (:data:`~model_adapters.templates.PROMPT_RECORD`), else the family default.
            chat_template: a Jinja template (or a ``.jinja`` file) replacing the checkpoint's own.
            family_kwargs: family options (e.g. ``crop_to_patches`` for InternVL); unknown ones are an error.
        """
        check_dtype(dtype, f"adapter {self.name}")
        if answer_format not in ANSWER_INSTRUCTIONS:
            raise CorlError(
                f"unknown answer_format '{answer_format}'; known: {', '.join(ANSWER_INSTRUCTIONS)}"
            )
        self.model_path = str(model_path)
        self.dtype = dtype  # as asked (may be "auto"); the weights' dtype is resolved_dtype(device)
        self.loaded_device = "cpu"  # where load_model last put the weights: what torch_dtype resolves against
        self.attn_implementation = attn_implementation
        self.trust_remote_code = trust_remote_code
        self.image_options = image_options_from(
            image_options, self.default_image_options(), f"adapter {self.name}: image_options"
        )
        self.answer_format = answer_format
        self.system_prompt = system_prompt
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        if template_date is None:
            record = read_prompt_record(model_path) if Path(self.model_path).is_dir() else None
            template_date = (record or {}).get("template_date") or self.default_template_date
        self.template_date = parse_template_date(
            template_date, f"adapter {self.name}: template_date"
        ).isoformat()
        if chat_template is not None and chat_template.endswith(".jinja"):
            try:
                chat_template = Path(chat_template).read_text()
            except OSError as err:
                raise CorlError(
                    f"adapter {self.name}: cannot read chat_template file {chat_template} ({err})"
                ) from None
        self._chat_template_override = chat_template
        self.configure(**family_kwargs)

    # ------------------------------------------------------------------ configuration (family hooks)
    def configure(self, **family_kwargs: Any) -> None:
        """Family hook: accept family options. The base accepts none, so a typo is an error, not a no-op."""
        if family_kwargs:
            raise CorlError(f"adapter {self.name}: unknown option(s) {', '.join(sorted(family_kwargs))}")

    def default_image_options(self) -> ImageOptions:
        """Family hook: image policy when the user gives none."""
        return ImageOptions()

    def processor_kwargs(self) -> dict[str, Any]:
        """Family hook: image-processor kwargs used by the HF path *and* sent to vLLM (same tokens both ways)."""
        return {}

    # ------------------------------------------------------------------ loading
    def resolved_dtype(self, device: str) -> str:
        """The weights' dtype on ``device`` (``auto`` resolved); ``torch_dtype``: on the last load's device."""
        return resolve_dtype(self.dtype, device)

    @property
    def torch_dtype(self) -> torch.dtype:
        import torch  # lazy: torch

        return getattr(torch, self.resolved_dtype(self.loaded_device))

    def load_model(self, *, device: str = "cpu") -> PreTrainedModel:
        """Load the weights on ``device`` in :meth:`resolved_dtype` (eval mode; the trainer calls ``train()``)."""
        import transformers  # lazy: transformers

        self.loaded_device = str(device)
        auto = getattr(transformers, self.auto_model_class)
        kwargs: dict[str, Any] = {"dtype": self.torch_dtype, "trust_remote_code": self.trust_remote_code}
        if self.attn_implementation:
            kwargs["attn_implementation"] = self.attn_implementation
        with self.zero3_init_guard():
            if random_init_record(self.model_path) is not None:  # a full-size preset: weights from its config
                kwargs.pop("dtype")
                kwargs.pop("trust_remote_code")
                model = self.build_random_model(auto, dtype=self.torch_dtype, device=device, **kwargs)
            else:
                model = auto.from_pretrained(self.model_path, **kwargs)
        return model.to(device).eval()

    @cached_property
    def processor(self) -> Any:
        """The HF processor (for text families: the tokenizer), loaded once."""
        from transformers import AutoProcessor  # lazy: transformers

        return AutoProcessor.from_pretrained(self.model_path, trust_remote_code=self.trust_remote_code)

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return getattr(self.processor, "tokenizer", self.processor)

    @property
    def pad_token_id(self) -> int:
        tok = self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        if pad is None:
            raise CorlError(f"{self.model_path}: tokenizer has neither a pad nor an eos token")
        return int(pad)

    @cached_property
    def stop_token_ids(self) -> list[int]:
        """Token ids that end a completion: the generation config's EOS ids plus the tokenizer's EOS."""
        ids: list[int] = []
        try:
            from transformers import GenerationConfig  # lazy: transformers

            eos = GenerationConfig.from_pretrained(self.model_path).eos_token_id
        except OSError:
            eos = None
        for value in [
            *(eos if isinstance(eos, list) else [eos]),
            self.tokenizer.eos_token_id,
            *self.extra_stop_ids(),
        ]:
            if value is not None and int(value) not in ids:
                ids.append(int(value))
        return ids

    @cached_property
    def placeholder_token_ids(self) -> list[int]:
        """Tokens a completion must never contain: the image placeholder(s) the model replaces with image
        features. Fed back to the trainer as text, one would make the forward fail ("image features and image
        tokens do not match") — likely with tiny random models, ~never with trained ones. Rollout engines end a
        completion before such a token (:func:`corl_vl.rollout.base.cut_at_stop`, which keeps every other
        token's logprob exact, unlike suppressing it); :meth:`training_batch` also neutralises any that slip
        through (scored as targets, but fed back as padding)."""
        if not self.image_token:
            return []
        token_id = self.tokenizer.convert_tokens_to_ids(self.image_token)
        return [] if token_id is None or token_id == self.tokenizer.unk_token_id else [int(token_id)]

    def extra_stop_ids(self) -> list[int]:
        """Family hook: more stop tokens (e.g. Gemma's ``<end_of_turn>``)."""
        return []

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        """Completion ids → text, without special tokens or leaked SentencePiece markers."""
        text = self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return text.replace("▁", " ")

    @contextlib.contextmanager
    def zero3_init_guard(self) -> Iterator[None]:
        """Family hook: a context active while weights are created (e.g. under ``deepspeed.zero.Init``)."""
        yield

    def vision_parameter_names(self, model: PreTrainedModel) -> list[str]:
        """Family hook: the vision side's parameters (tower and projector into the text model) — what freezing
        the vision side freezes, and what must move when a VLM learns from pictures. Default: every parameter
        outside the language model (``get_decoder()``) and the output head; empty for text-only families."""
        if not self.supports_images:
            return []
        text = {id(p) for p in model.get_decoder().parameters()}
        head = model.get_output_embeddings()
        text |= {id(p) for p in head.parameters()} if head is not None else set()
        return [name for name, p in model.named_parameters() if id(p) not in text]

    @classmethod
    def tiny_checkpoint(cls, seed: int = 0) -> Path | None:
        """Family hook: a tiny random checkpoint folder of the family (built once, cached), so the shared adapter
        tests and CPU smoke runs reach it; every built-in family and plug-in gives one (None: no tiny model)."""
        return None

    # ------------------------------------------------------------------ prompts
    def prepare_image(self, image: ImageLike) -> Image.Image:
        """Open (if a path) → RGB → long side capped; raises CorlError naming the file if unreadable."""
        return resize_long_side(load_image(image), self.image_options.max_long_side)

    def build_messages(self, problem: Problem, images: Sequence[Image.Image] | None = None) -> list[dict]:
        """Chat messages: images first, then the question with options and the answer instruction."""
        if problem.images and not self.supports_images:
            raise CorlError(f"problem {problem.id}: has images but adapter '{self.name}' is text-only")
        content: list[dict[str, Any]] = [{"type": "image", "image": im} for im in (images or problem.images)]
        content.append({"type": "text", "text": format_question(problem, self.answer_format)})
        messages: list[dict[str, Any]] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": [{"type": "text", "text": self.system_prompt}]})
        messages.append({"role": "user", "content": content})
        return messages

    def render_prompt(self, problem: Problem) -> tuple[str, list[Image.Image]]:
        """The chat-templated prompt string (with one placeholder per image) and the prepared images."""
        images = [self.prepare_image(im) for im in problem.images] if self.supports_images else []
        messages = self.build_messages(problem, images)
        return self.render_chat(messages), images

    def _add_special_tokens(self, text: str) -> bool:
        """False when the template already emitted BOS (Gemma, Llama-3): a second BOS degrades the model."""
        bos = self.tokenizer.bos_token
        return not (bos is not None and text.startswith(bos))

    def encode_prompt(self, problem: Problem) -> PromptInputs:
        """Problem → expanded prompt ids + this prompt's image tensors, via the family's processor.

        The one place a prompt is rendered: the unexpanded ids (for vLLM) and the expanded ids + pixels (for HF
        and the trainer) are both tokenised from this single rendering.
        """
        text, images = self.render_prompt(problem)
        add_special = self._add_special_tokens(text)
        request_ids = list(self.tokenizer(text, add_special_tokens=add_special)["input_ids"])
        if images:
            self._check_placeholders(problem, text, len(images))
            out = self.processor(
                text=[text],
                images=self.processor_images([images]),
                add_special_tokens=add_special,
                return_tensors="pt",
                **self.processor_kwargs(),
            )
            ids = out["input_ids"][0].tolist()
            mm = {
                k: v
                for k, v in out.items()
                if k not in ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids")
            }
            self._check_image_tokens(problem, ids, len(images))
        else:
            ids, mm = request_ids, {}
        return PromptInputs(
            problem_id=problem.id,
            prompt_ids=list(ids),
            mm_inputs=mm,
            prompt_text=text,
            request_ids=request_ids,
            images=list(images),
        )

    def _placeholder_error(self, problem: Problem, found: str, n_images: int) -> CorlError:
        placeholder = self.template_image_placeholder or self.image_token
        return CorlError(
            f"adapter {self.name}: the chat template of {self.model_path} rendered {found} for {n_images} "
            f"image(s) of problem {problem.id}; the processor expands '{placeholder}', one per image part. "
            f"Fix: give the checkpoint a template that writes '{placeholder}' for each image part "
            f"(chat_template.jinja), or pass the adapter option chat_template=PATH.jinja"
        )

    def _check_placeholders(self, problem: Problem, text: str, n_images: int) -> None:
        """Fewer placeholders than images in the rendered text (e.g. an InternVL template writing ``<image>``)
        would reach the model as plain text and fail later with a shape mismatch: one clear error now."""
        placeholder = self.template_image_placeholder or self.image_token
        if placeholder and text.count(placeholder) < n_images:
            raise self._placeholder_error(problem, f"{text.count(placeholder)} '{placeholder}'", n_images)

    def _check_image_tokens(self, problem: Problem, ids: Sequence[int], n_images: int) -> None:
        """The processed prompt must hold at least one image token per image."""
        image_ids = set(self.placeholder_token_ids)
        if image_ids and sum(1 for t in ids if t in image_ids) < n_images:
            raise self._placeholder_error(problem, "fewer image tokens than images", n_images)

    def processor_images(self, images: list[list[Image.Image]]) -> Any:
        """Family hook: the image argument the processor wants for a batch (nested per sample by default)."""
        return images
