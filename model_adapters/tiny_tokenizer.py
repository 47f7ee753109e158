"""Locally trained tokenizers for the tiny model zoo: the builder; each family's spec lives in its folder.

No model hub is reachable here, yet adapters, rollout engines and graders must see the *same* token-level
behaviour as the real families: the same special tokens, the same chat-template layout (where BOS comes from,
how images are spliced in, which token ends a turn). So each family gets a byte-level BPE trained with
``tokenizers`` on a small built-in corpus (English plus math: digits, ``\\boxed{}``, ``\\frac``), its real
special tokens, and a chat template written to produce the real family's prompt format. Those two are the
family's :class:`TokenizerSpec`, declared beside its tiny recipe (``model_adapters/<family>/tiny.py``), so a new
family — built in or a plug-in — brings its own and never edits this module.

The tokenizer never depends on the model seed: two agents of one family built with different seeds share it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

VOCAB_SIZE = (
    4096  # cap for the BPE vocabulary; the built-in corpus yields ≈ 1,670 tokens incl. bytes and specials
)


@dataclass(frozen=True)
class TokenizerSpec:
    """What one family's tokenizer must contain and how it behaves."""

    specials: tuple[str, ...]  # special tokens, ids 0..k-1 in this order
    bos: str | None  # tokenizer's bos_token (None: the family's tokenizer has none, e.g. Qwen)
    eos: str  # end of an assistant turn (instruct eos)
    pad: str
    chat_template: (
        str  # Jinja; content is a string or a list of {"type": "image"} / {"type": "text", …} parts
    )
    named: dict[str, str] = field(
        default_factory=dict
    )  # tokenizer attributes processors read (image_token …)
    plain_added: tuple[str, ...] = ()  # added but not special (kept when decoding with skip_special_tokens)
    add_bos: bool = False  # encoding prepends bos (Gemma, Llama) — the source of the double-BOS trap
    unk: str | None = None
    generation_eos: tuple[str, ...] = ()  # every token that ends generation (generation_config.eos_token_id)


_WORDS = (
    "the a an of to in on at by for with from and or but not is are was were be been has have had do does did "
    "what which who whom whose when where why how many much more most less least than then there here this that "
    "these those each every all some any no none one two three four five six seven eight nine ten hundred thousand "
    "first second third last next previous total sum difference product quotient ratio percent fraction decimal "
    "number numbers digit digits integer integers prime even odd positive negative zero value values answer answers "
    "question questions problem problems solution solve solving equation equations variable expression term terms "
    "add added adding subtract subtracted multiply multiplied divide divided equal equals greater smaller larger "
    "circle circles square squares triangle triangles rectangle shape shapes line lines point points angle angles "
    "area perimeter radius diameter length width height side sides edge corner center middle left right top bottom "
    "bar bars chart charts graph table row rows column columns label labels axis scale picture image figure shown "
    "red blue green yellow black white orange purple gray color colors big small tall short long wide narrow "
    "count counting read reading compare comparing find finding compute computing calculate check checking "
    "step steps reason reasoning therefore because since so hence thus final result results correct wrong true "
    "false option options choose choice select given let suppose assume consider note recall know known unknown "
    "apple apples orange oranges book books student students class teacher school day days week weeks year years "
    "hour hours minute minutes second speed distance time train car cars city road price cost money dollars coins "
    "box boxes bag bags ball balls cup cups group groups pair pairs set sets part parts whole half quarter double "
    "probability chance random average mean median mode range data sample sequence pattern rule function graph "
    "slope intercept coordinate coordinates plane grid unit units meter meters centimeter kilogram liter degree "
    "please put within your inside write give show explain think thinking assistant user system helpful model "
    "image text visual look looking see seen appears contains each other both either neither only also just still "
    "after before during while until between among above below under over into onto out up down around through "
    "we you they he she it i me my our their its his her them us can could will would should must may might "
    "new old same different similar simple hard easy small large fast slow high low early late good best better"
)

_TEMPLATES = (
    "{W} {w} {w} {w} {w} {w}.",
    "{W} {w} {w}, {w} {w} {w} {w}?",
    "{W} {w} {w} {w}: {w}, {w} and {w}.",
    "{W} {w} {a} {w} {w} {b} {w}, {w} {w} is \\boxed{{{c}}}.",
)


def _corpus() -> list[str]:
    """A small deterministic corpus: prose, arithmetic with worked answers, LaTeX and the prompt wording."""
    fixed = [
        "Please reason step by step, and put your final answer within \\boxed{}.",
        "Choose the correct option: (A) red (B) blue (C) green (D) yellow. The answer is (B).",
        "\\frac{1}{2} + \\frac{1}{3} = \\frac{5}{6}",
        "\\sqrt{16} = 4 and \\sqrt{2} \\approx 1.414",
        "x^2 - 5x + 6 = 0 \\implies x = 2 \\text{ or } x = 3",
        "\\pi r^2 with r = 3 gives 9\\pi; \\cdot \\times \\div \\leq \\geq \\neq",
        "\\left( a + b \\right)^2 = a^2 + 2ab + b^2",
        "\\sum_{k=1}^{n} k = \\frac{n(n+1)}{2}",
        "<think>\nLet me check the arithmetic.\n</think>\n\nThe final answer is $\\boxed{42}$.",
        "<answer>7</answer>\n\n",
    ]
    words = _WORDS.split()
    rng = random.Random(0)  # fixed: the tokenizer must not depend on the model seed
    lines = fixed * 20
    for _ in range(6000):
        template = rng.choice(_TEMPLATES)
        a, b = rng.randint(0, 999), rng.randint(0, 99)
        text = template.replace("{W}", rng.choice(words).capitalize())
        while "{w}" in text:
            text = text.replace("{w}", rng.choice(words), 1)
        lines.append(text.format(a=a, b=b, c=a + b))
    for a in range(0, 60, 3):
        for b in range(1, 40, 7):
            lines.append(f"What is {a} + {b}? {a} + {b} = {a + b}, so the answer is \\boxed{{{a + b}}}.")
            lines.append(f"Compute {a} \\times {b}. We get {a * b}. Final answer: $\\boxed{{{a * b}}}$")
            lines.append(f"Compute \\frac{{{a}}}{{{b}}} + \\sqrt{{{a}}} - {b}^2 \\cdot {a}")
    return lines


def build_tokenizer(spec: TokenizerSpec):  # -> transformers.PreTrainedTokenizerFast
    """Train a byte-level BPE on the built-in corpus and wrap it as a transformers tokenizer of the family that
    ``spec`` describes (its special tokens, chat template, bos/eos/pad)."""
    from transformers import PreTrainedTokenizerFast  # lazy: transformers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    # Digits one by one, as Qwen/Llama-3 do: keeps arithmetic tokenisation regular.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(spec.specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in spec.specials])
    if spec.plain_added:
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in spec.plain_added])
    if spec.add_bos:
        assert spec.bos is not None
        bos_id = tok.token_to_id(spec.bos)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{spec.bos} $A", pair=f"{spec.bos} $A {spec.bos} $B", special_tokens=[(spec.bos, bos_id)]
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    kwargs: dict = {
        "eos_token": spec.eos,
        "pad_token": spec.pad,
        "chat_template": spec.chat_template,
        "model_max_length": 4096,
        "padding_side": "left",  # generation batches are left-padded
        "clean_up_tokenization_spaces": False,
        "extra_special_tokens": dict(spec.named) if spec.named else None,
    }
    if spec.bos is not None:
        kwargs["bos_token"] = spec.bos
    if spec.unk is not None:
        kwargs["unk_token"] = spec.unk
    return PreTrainedTokenizerFast(tokenizer_object=tok, **kwargs)


def token_ids(tokenizer, tokens: tuple[str, ...] | list[str]) -> list[int]:
    """Ids of tokens that must exist (a missing one is a bug in the family's spec, caught at build time)."""
    ids = [tokenizer.convert_tokens_to_ids(t) for t in tokens]
    missing = [t for t, i in zip(tokens, ids, strict=True) if i is None or i == tokenizer.unk_token_id]
    if missing:
        raise RuntimeError(f"tiny tokenizer lacks {missing}")
    return ids
