"""Every family's prompt layout, a pinned template date, the checkpoint's prompt record, image placeholders.

The expected strings are written by hand from the layouts listed in docs/adapters.md (the published templates'
output for one user turn); the tiny zoo's templates must reproduce them exactly, default system blocks included.
"""

from __future__ import annotations

import datetime
import json
import shutil

import pytest
import yaml
from PIL import Image

from corl_vl.cli import main as cli_main
from corl_vl.config import config_from_dict, to_dict
from corl_vl.data.problem import Problem
from corl_vl.errors import CorlError
from model_adapters import create_adapter
from model_adapters.templates import PROMPT_RECORD

Q = "Which is bigger?\nA. 3/4\nB. 0.7 Please reason step by step, and put your final answer within \\boxed{}."
SYSTEM = "You are a careful grader."

# family → (expected prompt for the problem with one image (VLMs) or text-only, the same with a system prompt)
LAYOUTS = {
    "tiny-qwen2.5-vl": (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        f"<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>{Q}<|im_end|>\n<|im_start|>assistant\n",
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
        f"<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>{Q}<|im_end|>\n<|im_start|>assistant\n",
    ),
    "tiny-internvl3.5": (
        f"<|im_start|>user\n<IMG_CONTEXT>\n{Q}<|im_end|>\n<|im_start|>assistant\n",
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n<IMG_CONTEXT>\n{Q}<|im_end|>\n"
        "<|im_start|>assistant\n",
    ),
    "tiny-gemma3": (
        f"<bos><start_of_turn>user\n<start_of_image>{Q}<end_of_turn>\n<start_of_turn>model\n",
        f"<bos><start_of_turn>user\n{SYSTEM}\n\n<start_of_image>{Q}<end_of_turn>\n<start_of_turn>model\n",
    ),
    "tiny-qwen2.5": (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        f"<|im_start|>user\n{Q}<|im_end|>\n<|im_start|>assistant\n",
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{Q}<|im_end|>\n<|im_start|>assistant\n",
    ),
    "tiny-llama3": (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
        f"<|start_header_id|>user<|end_header_id|>\n\n{Q}<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        f"Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n{SYSTEM}<|eot_id|>"
        f"<|start_header_id|>user<|end_header_id|>\n\n{Q}<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
    "tiny-qwen3": (
        f"<|im_start|>user\n{Q}<|im_end|>\n<|im_start|>assistant\n",
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{Q}<|im_end|>\n<|im_start|>assistant\n",
    ),
}


def _problem(adapter) -> Problem:
    images = [Image.new("RGB", (90, 60), "red")] if adapter.supports_images else []
    return Problem("q1", "Which is bigger?", images=images, choices=["3/4", "0.7"])


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_tiny_template_reproduces_the_published_layout(name):
    plain, with_system = LAYOUTS[name]
    adapter = create_adapter(name)
    assert adapter.encode_prompt(_problem(adapter)).prompt_text == plain
    assert create_adapter(name, system_prompt=SYSTEM).render_prompt(_problem(adapter))[0] == with_system


def test_qwen3_thinking_switch_writes_an_empty_think_block():
    adapter = create_adapter("tiny-qwen3", chat_template_kwargs={"enable_thinking": False})
    text = adapter.render_prompt(_problem(adapter))[0]
    assert text == f"<|im_start|>user\n{Q}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def _freeze_clock(monkeypatch, day: datetime.date) -> None:
    """Move the clock transformers gives chat templates (``strftime_now``) to ``day``, 23:59."""
    from transformers.utils import chat_template_utils

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(day.year, day.month, day.day, 23, 59)

    monkeypatch.setattr(chat_template_utils, "datetime", Frozen)


def test_same_prompt_ids_when_the_clock_moves_a_day(monkeypatch):
    adapter = create_adapter("tiny-llama3")
    problem = _problem(adapter)
    messages = adapter.build_messages(problem)
    ids, unpinned = [], []
    for day in (datetime.date(2026, 11, 30), datetime.date(2026, 12, 1)):
        _freeze_clock(monkeypatch, day)
        ids.append(adapter.encode_prompt(problem).prompt_ids)
        unpinned.append(
            adapter.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        )
    assert (
        "Today Date: 30 Nov 2026" in unpinned[0] and "Today Date: 01 Dec 2026" in unpinned[1]
    )  # clock moved
    assert ids[0] == ids[1]  # ... the adapter's prompt did not


def test_template_date_is_configurable_and_validated():
    adapter = create_adapter("tiny-llama3", template_date="2025-01-02")
    assert "Today Date: 02 Jan 2025\n" in adapter.render_prompt(_problem(adapter))[0]
    assert create_adapter("tiny-qwen2.5-vl").template_date == "2024-07-26"  # per-adapter default
    with pytest.raises(CorlError, match="template_date: expected a date as YYYY-MM-DD"):
        create_adapter("tiny-llama3", template_date="Jan 2, 2025")


def test_config_records_the_pinned_date(tmp_path):
    from corl_vl.recipe import pin_template_dates

    raw = {"agents": [{"name": "a", "model": "tiny-llama3"}, {"name": "b", "model": "tiny-qwen2.5"}]}
    raw["agents"][1]["template_date"] = datetime.date(2025, 3, 4)  # YAML reads an unquoted date as a date
    cfg = config_from_dict(raw)
    assert [a.template_date for a in cfg.agents] == [None, "2025-03-04"]
    pin_template_dates(cfg)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg)))
    text = (tmp_path / "config.yaml").read_text()
    assert "template_date: '2024-07-26'" in text and "template_date: '2025-03-04'" in text
    assert cfg.agents[1].adapter_options() == {"template_date": "2025-03-04"}
    bad = {"agents": [{"name": "a", "model": "m", "template_date": "tomorrow"}, {"name": "b", "model": "n"}]}
    with pytest.raises(CorlError, match=r"agents\.0\.template_date: expected YYYY-MM-DD"):
        config_from_dict(bad)


def test_checkpoint_prompt_record_pins_later_renderings(tmp_path, tiny_checkpoint):
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint("tiny-llama3"), folder)
    trained = create_adapter(folder, template_date="2025-05-06")
    trained.save_prompt_record(folder)
    record = json.loads((folder / PROMPT_RECORD).read_text())
    assert record["template_date"] == "2025-05-06" and record["template_reads_clock"] is True
    assert record["chat_template"] == trained.chat_template == (folder / "chat_template.jinja").read_text()
    later = create_adapter(folder)  # e.g. `corl-vl eval --model` on the checkpoint: the trained date
    assert later.template_date == "2025-05-06"
    assert (
        later.encode_prompt(_problem(later)).prompt_ids == trained.encode_prompt(_problem(later)).prompt_ids
    )


def _with_template(tmp_path, name: str, tiny_checkpoint, edit) -> str:
    folder = tmp_path / name
    shutil.copytree(tiny_checkpoint(name), folder)
    path = folder / "chat_template.jinja"
    path.write_text(edit(path.read_text()))
    return str(folder)


def test_internvl_accepts_the_older_image_placeholder(tmp_path, tiny_checkpoint):
    legacy = _with_template(
        tmp_path, "tiny-internvl3.5", tiny_checkpoint, lambda t: t.replace("<IMG_CONTEXT>", "<image>")
    )
    assert "<image>" in (tmp_path / "tiny-internvl3.5" / "chat_template.jinja").read_text()
    old, new = create_adapter(legacy), create_adapter("tiny-internvl3.5")
    problem = _problem(new)
    assert old.encode_prompt(problem).prompt_ids == new.encode_prompt(problem).prompt_ids
    # the question's own text is never rewritten: only the template's placeholder is
    mention = Problem("m", "The figure <image> shows circles.", images=[Image.new("RGB", (64, 64))])
    assert "The figure <image> shows circles." in old.encode_prompt(mention).prompt_text


def test_fewer_image_placeholders_than_images_is_one_clear_error(tmp_path, tiny_checkpoint):
    dropped = _with_template(
        tmp_path,
        "tiny-qwen2.5-vl",
        tiny_checkpoint,
        lambda t: t.replace("<|vision_start|><|image_pad|><|vision_end|>", ""),
    )
    adapter = create_adapter(dropped)
    with pytest.raises(CorlError) as err:
        adapter.encode_prompt(_problem(adapter))
    message = str(err.value)
    assert (
        f"the chat template of {dropped} rendered 0 '<|image_pad|>' for 1 image(s) of problem q1" in message
    )
    assert "Fix:" in message and "chat_template=PATH.jinja" in message
    # the fix works: a template file given as an adapter option
    fixed = create_adapter(
        dropped, chat_template=str(tiny_checkpoint("tiny-qwen2.5-vl") / "chat_template.jinja")
    )
    assert (
        fixed.encode_prompt(_problem(fixed)).prompt_ids
        == create_adapter("tiny-qwen2.5-vl").encode_prompt(_problem(fixed)).prompt_ids
    )


def test_adapters_check_prints_prompts_stop_tokens_bos_and_image_tokens(capsys, tiny_checkpoint):
    assert cli_main(["adapters", "check", str(tiny_checkpoint("tiny-llama3"))]) == 0
    out = capsys.readouterr().out
    assert "template:   reads the clock; pinned to 2024-07-26" in out
    assert "stop tokens: <|end_of_text|>" in out and "<|eot_id|>" in out
    assert "BOS count: 1" in out and "Today Date: 26 Jul 2024" in out and "image problem" not in out

    assert cli_main(["adapters", "check", str(tiny_checkpoint("tiny-gemma3")), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    text, image = report["prompts"]
    assert (text["kind"], image["kind"], image["images"]) == ("text", "image", 1)
    assert text["bos_count"] == image["bos_count"] == 1 and text["image_tokens"] == 0
    assert image["image_tokens"] == 16 and "<start_of_image>" in image["prompt_text"]
    assert [tok for _, tok in report["stop_tokens"]] == ["<eos>", "<end_of_turn>"] and report["ok"]


def test_adapters_check_fails_on_a_template_without_image_placeholders(tmp_path, capsys, tiny_checkpoint):
    dropped = _with_template(
        tmp_path, "tiny-internvl3.5", tiny_checkpoint, lambda t: t.replace("<IMG_CONTEXT>\n", "")
    )
    assert cli_main(["adapters", "check", dropped]) == 1
    out = capsys.readouterr().out
    assert "FAIL: adapter internvl3_5: the chat template of" in out and "PROBLEMS FOUND" in out


def test_checkpoint_without_a_chat_template(tmp_path, tiny_checkpoint):
    """A base model has no template: the default adapter says how to add one; a plain-prompt adapter still
    encodes and its checkpoints record that no template was used."""
    from model_adapters.causal_lm import CausalLMAdapter

    folder = tmp_path / "base-model"
    shutil.copytree(tiny_checkpoint("tiny-qwen2.5"), folder)
    (folder / "chat_template.jinja").unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(CorlError, match=r"has no \(single\) chat template; add chat_template\.jinja"):
        create_adapter(folder).encode_prompt(Problem("p", "2+2?"))

    class PlainPrompt(CausalLMAdapter):
        def render_prompt(self, problem):
            return f"Question: {problem.question}\nAnswer:", []

    adapter = PlainPrompt(folder)
    assert adapter.encode_prompt(Problem("p", "2+2?")).prompt_text == "Question: 2+2?\nAnswer:"
    record = adapter.prompt_record()
    assert record["chat_template"] is None and record["template_reads_clock"] is False
