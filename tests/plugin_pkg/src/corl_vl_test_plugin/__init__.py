"""A minimal third-party adapter: a text model prompted with a plain "Question/Answer" format, no chat template.

It exists to prove that a package outside corl-vl can add a family through the ``corl_vl.adapters`` entry point
alone (``docs/adapters.md`` walks through the same steps). It reuses the causal-LM adapter and changes only the
prompt, the way a base (non-instruct) model would be prompted.
"""

from __future__ import annotations

from typing import Any

from corl_vl.data.problem import Problem
from model_adapters.base import format_question
from model_adapters.causal_lm import CausalLMAdapter


class PlainPromptAdapter(CausalLMAdapter):
    """``Question: …\\nAnswer:`` prompts for base models; everything else inherited from ``causal_lm``."""

    model_types = ()  # never auto-detected: chosen by name (adapter="plain_lm")

    def build_messages(self, problem: Problem, images: Any = None) -> list[dict]:
        return [{"role": "user", "content": format_question(problem, self.answer_format)}]

    def render_prompt(self, problem: Problem) -> tuple[str, list]:
        (message,) = self.build_messages(problem)
        return f"Question: {message['content']}\nAnswer:", []
