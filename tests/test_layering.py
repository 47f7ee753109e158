"""The package layering: no import-time cycle between corl-vl's packages, the trainer core free of the research
tools and the CLI, and a light config module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _node(module: str) -> str | None:
    """A package (``corl_vl.train``), a top-level module (``corl_vl.config``) or ``model_adapters``."""
    parts = module.split(".")
    if parts[0] == "model_adapters":
        return "model_adapters"
    if parts[0] != "corl_vl" or len(parts) == 1:
        return None  # corl_vl/__init__.py only resolves names lazily
    return f"corl_vl.{parts[1]}"


def _import_time_imports(tree: ast.Module) -> list[str]:
    """Modules imported when the file is imported: module-level statements, including those under
    ``try``/``if`` (but not ``if TYPE_CHECKING:``), never inside functions or classes."""
    found: list[str] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.If) and not (
            isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        ):
            pending += node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
    return found


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in [*ROOT.glob("corl_vl/**/*.py"), *ROOT.glob("model_adapters/**/*.py")]:
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        source = _node(module)
        if source is None:
            continue
        for name in _import_time_imports(ast.parse(path.read_text())):
            target = _node(name)
            if target is not None and target != source:
                graph.setdefault(source, set()).add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_on_a_worked_example():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_time_cycle_between_packages():
    assert cycles(import_graph()) == []


def test_trainer_core_imports_neither_research_tools_nor_cli():
    graph = import_graph()
    assert not graph.get("corl_vl.train", set()) & {"corl_vl.science", "corl_vl.cli", "corl_vl.recipe"}
    lazy = [
        (path.name, line)
        for path in ROOT.glob("corl_vl/train/*.py")
        for line in path.read_text().splitlines()
        if line.strip().startswith(("import", "from"))
        and ("corl_vl.science" in line or "corl_vl.cli" in line)
    ]
    assert lazy == []


def test_importing_the_config_loads_few_modules():
    code = "import corl_vl.config, sys; print(len([m for m in sys.modules if m.startswith('corl_vl')]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(out) <= 8


def test_the_cli_answers_help_without_pillow():
    """The offline GPU image gets corl-vl from a wheel folder (docs/install.md); `corl-vl --help` must work
    before anything image-related is importable, so no subcommand imports Pillow when it registers."""
    code = (
        "import sys; sys.modules['PIL'] = None\n"  # any `import PIL` now fails
        "from corl_vl.cli import build_parser\n"
        "build_parser().format_help()\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
