"""The chat-template side of an adapter: which template renders prompts, the variables it sees (a pinned
clock), and the record a checkpoint keeps so its prompts can be rendered again exactly.

Why a mixin of its own: reproducible prompts are one job (render once, pin the date, record the template);
:class:`~model_adapters.base.ModelAdapter` only calls :attr:`chat_template` and :meth:`template_variables`.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

from corl_vl.errors import CorlError

from .templates import parse_template_date, pinned_clock, uses_clock, write_prompt_record


def _describe(err: Exception) -> str:
    """A Jinja error in one line: its kind, line (when known) and message."""
    line = getattr(err, "lineno", None)
    where = f" at line {line}" if line else ""
    message = str(getattr(err, "message", None) or err).strip().splitlines()
    return f"Jinja {type(err).__name__}{where}: {(message[0] if message else '')[:200]}"


def _compile(template: str, origin: str) -> None:
    """Compile ``template`` the way the processor will (transformers' sandboxed environment and extensions),
    so a syntax error is one line."""
    from jinja2 import TemplateError  # lazy: jinja2
    from transformers.utils.chat_template_utils import _compile_jinja_template  # lazy: transformers

    try:
        _compile_jinja_template(template)
    except TemplateError as err:
        raise CorlError(f"{origin}: {_describe(err)}; fix the template") from None


def _jsonable(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool, type(None), list, dict))


class ChatTemplating:
    """Mixed into :class:`~model_adapters.base.ModelAdapter` (which sets the attributes used here)."""

    name: str
    model_path: str
    template_date: str
    chat_template_kwargs: dict[str, Any]
    system_prompt: str | None
    answer_format: str
    _chat_template_override: str | None
    processor: Any
    tokenizer: Any

    @cached_property
    def chat_template(self) -> str:
        """The exact Jinja template prompts are rendered with: the override, else the checkpoint's, passed
        through :meth:`normalize_chat_template`."""
        template = self._chat_template_override
        if template is None:
            template = getattr(self.processor, "chat_template", None) or self.tokenizer.chat_template
        if not isinstance(template, str) or not template:
            raise CorlError(
                f"{self.model_path}: the checkpoint has no (single) chat template; add chat_template.jinja to "
                f"it or pass the adapter option chat_template=PATH.jinja"
            )
        template = self.normalize_chat_template(template)
        _compile(template, self.template_origin)  # a syntax error is found here, before any prompt renders
        return template

    @property
    def template_origin(self) -> str:
        """Where the chat template came from, for error messages."""
        if self._chat_template_override is not None:
            return f"adapter {self.name}: the chat_template option"
        return f"{self.model_path}: its chat template"

    def render_chat(self, messages: list[dict[str, Any]]) -> str:
        """``messages`` rendered with :attr:`chat_template` (generation prompt added). The processor renders in
        Jinja's sandbox; what the sandbox refuses, and any other template error, is one line naming the
        template."""
        from jinja2 import TemplateError  # lazy: jinja2

        template = self.chat_template
        try:
            return self.processor.apply_chat_template(
                messages,
                chat_template=template,
                tokenize=False,
                add_generation_prompt=True,
                **self.template_variables(),
            )
        except TemplateError as err:
            raise CorlError(f"{self.template_origin}: {_describe(err)}; fix the template") from None

    def normalize_chat_template(self, template: str) -> str:
        """Family hook: rewrite known variants of the family's template into the form its processor expects."""
        return template

    def template_variables(self) -> dict[str, Any]:
        """Variables the template is rendered with: the pinned clock (templates that read one) + user kwargs."""
        variables: dict[str, Any] = {}
        if uses_clock(self.chat_template):
            variables.update(pinned_clock(parse_template_date(self.template_date)))
        variables.update(self.chat_template_kwargs)
        return variables

    def prompt_record(self) -> dict[str, Any]:
        """What a checkpoint stores so its prompts can be rendered again exactly (see :mod:`.templates`).

        ``chat_template`` is None for an adapter that formats prompts without one (a base-model plugin).
        """
        try:
            template: str | None = self.chat_template
        except CorlError:
            template = None
        return {
            "adapter": self.name,
            "template_date": self.template_date,
            "template_reads_clock": template is not None and uses_clock(template),
            "chat_template_kwargs": {k: v for k, v in self.chat_template_kwargs.items() if _jsonable(v)},
            "system_prompt": self.system_prompt,
            "answer_format": self.answer_format,
            "chat_template": template,
        }

    def save_prompt_record(self, folder: str | Path) -> Path:
        """Write :meth:`prompt_record` into a checkpoint folder (next to the processor files)."""
        return write_prompt_record(folder, self.prompt_record())
