"""Every ``corl-vl …`` command (also ``torchrun … -m corl_vl …``) in a fenced block of README.md and docs/*.md
parses with the real parser.

A dry parse (``build_parser().parse_args``, nothing runs): it catches renamed or removed flags, wrong choices and
values of the wrong type, which is how documentation drifts from the code. Synopsis lines are parsed with every
optional part given: ``[--k 8]`` counts as ``--k 8``, ``a|b`` as ``a``, and ``...`` is dropped. Lines that show
output (``corl-vl train: error: …``) are not commands.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from corl_vl.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^\s*```")
# [$ ] [VAR=x …] corl-vl …, or a launcher's … -m corl_vl …; not output such as "corl-vl train: error: …"
COMMAND = re.compile(
    r"^\s*(?:\$\s+)?(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:corl-vl|(?:torchrun|accelerate|python)\b.*\s-m\s+corl_vl)"
    r"(?:\s|$)(?!\s*[\w-]+:)"
)
OPTIONAL = re.compile(r"\[(\s*-[^\[\]]*)\]")  # a synopsis' [--flag VALUE]


def _argv(words: list[str]) -> list[str]:
    """A synopsis' words as one concrete command line: first alternatives, no ellipses."""
    out = []
    for word in words:
        if word in ("...", "…"):
            continue
        out.append(word.split("|")[0] if "|" in word and not word.startswith("-") else word)
    return out


def _commands(path: Path) -> list[tuple[int, list[str]]]:
    """``(line number, argv after corl-vl)`` of each corl-vl command inside fenced blocks."""
    out: list[tuple[int, list[str]]] = []
    inside, pending, start = False, "", 0
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            inside, pending = not inside, ""
            continue
        if not inside or not (pending or COMMAND.match(line)):
            continue
        if not pending:
            start = lineno
        pending += line.rstrip()
        if pending.endswith("\\"):  # a continued shell line
            pending = pending[:-1] + " "
            continue
        words, pending = shlex.split(OPTIONAL.sub(r"\1", pending), comments=True), ""
        program = "corl-vl" if "corl-vl" in words else "corl_vl"
        out.append((start, _argv(words[words.index(program) + 1 :])))
    return out


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMANDS = [(f"{doc.relative_to(ROOT)}:{n}", argv) for doc in DOCS for n, argv in _commands(doc)]


def test_the_docs_have_commands():
    assert len(COMMANDS) >= 20 and {argv[0] for _, argv in COMMANDS if argv} >= {"train", "eval", "theory"}


@pytest.mark.parametrize(("where", "argv"), COMMANDS, ids=[where for where, _ in COMMANDS])
def test_documented_command_parses(where, argv, capsys):
    try:
        build_parser().parse_args(argv)
    except SystemExit as stop:
        assert stop.code == 0, f"{where}: corl-vl {shlex.join(argv)}\n{capsys.readouterr().err.strip()}"
