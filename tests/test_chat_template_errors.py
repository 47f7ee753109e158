"""A user's chat template that Jinja cannot parse, or that the sandbox stops, is one line naming the template."""

from __future__ import annotations

import pytest

from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from model_adapters import create_adapter

PROBLEM = Problem("p1", "What is 2 + 3?", answer="5")


def test_template_syntax_error_names_the_template(tmp_path):
    path = tmp_path / "broken.jinja"
    path.write_text("{% for message in messages %}{{ message['role'] }\n{% endfor %}")
    adapter = create_adapter("tiny-qwen2.5", chat_template=str(path))
    with pytest.raises(
        CorlError, match=r"adapter .*: the chat_template option: Jinja TemplateSyntaxError at line 1"
    ):
        adapter.encode_prompt(PROBLEM)


@pytest.mark.parametrize(
    "template",
    [
        "{{ messages.append({'role': 'user'}) }}",  # the immutable sandbox refuses to change its input
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",  # the classic escape attempt
        "{{ raise_exception('no system prompts here') }}",
    ],
)
def test_template_stopped_at_render_is_one_line(template):
    adapter = create_adapter("tiny-qwen2.5", chat_template=template)
    with pytest.raises(CorlError, match=r"the chat_template option: Jinja \w+Error.*fix the template") as err:
        adapter.encode_prompt(PROBLEM)
    assert "\n" not in str(err.value)
