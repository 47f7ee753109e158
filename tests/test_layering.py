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


# --------------------------------------------------------------------------------------------------------------
# Module cycles counting imports inside functions: deferring an import hides a cycle from the import-time check
# above, not from a reader. There are none, and any new one fails here.
# --------------------------------------------------------------------------------------------------------------

# Where model_adapters/ may import inside a function: to keep a heavy dependency off a light import path.
HEAVY = {"torch", "transformers", "vllm", "safetensors", "PIL", "qwen_vl_utils", "jinja2", "huggingface_hub"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in [*ROOT.glob("corl_vl/**/*.py"), *ROOT.glob("model_adapters/**/*.py")]:
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    return {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for stmt in node.body
        for inner in ast.walk(stmt)
    }


def _imported(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> list[str]:
    """The project modules an import statement loads (``from pkg import sub`` → ``pkg.sub`` when a module)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".")[: None if is_package else -1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, *([node.module] if node.module else [])])
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    found = []
    for name in names:
        while name not in known and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in known and name != module:
            found.append(name)
    return found


def module_graph() -> dict[str, set[str]]:
    """Module → the project modules it imports, at import time or inside functions (not under TYPE_CHECKING)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        skip = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skip:
                targets = _imported(module, path.name == "__init__.py", node, set(modules))
                graph.setdefault(module, set()).update(targets)
    return graph


def test_module_graph_resolves_relative_and_deferred_imports():
    graph = module_graph()
    assert "model_adapters.base" in graph["model_adapters.registry"]  # `from .base import ModelAdapter`
    assert "model_adapters.presets" in graph["corl_vl.cli.models"]  # imported inside a function


def test_no_module_cycle_counting_imports_inside_functions():
    assert cycles(module_graph()) == []


def package_graph(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto packages (:func:`_node`: each subpackage of corl_vl, each top-level module of
    corl_vl, and model_adapters with its family folders as one), so deferred imports count here too."""
    graph: dict[str, set[str]] = {}
    for module, targets in modules.items():
        source = _node(module)
        for target in map(_node, targets):
            if source is not None and target is not None and target != source:
                graph.setdefault(source, set()).add(target)
    return graph


def test_package_graph_catches_a_cycle_through_an_import_inside_a_function():
    """Worked examples: modules fold onto their packages, and a deferred import that points back up closes a
    package cycle although no module cycle exists (here: ``data.rephrase`` calling ``eval.generate`` inside a
    function, the import this layering removed)."""
    folded = package_graph(
        {"corl_vl.a.x": {"corl_vl.b.y"}, "corl_vl.b.z": {"corl_vl.a.w"}, "corl_vl.b.y": set()}
    )
    assert folded == {"corl_vl.a": {"corl_vl.b"}, "corl_vl.b": {"corl_vl.a"}}
    assert cycles(folded) == [["corl_vl.a", "corl_vl.b"]]
    modules = module_graph()
    assert "corl_vl.data" in package_graph(modules)["corl_vl.eval"]  # eval reads Problem records
    injected = {
        **modules,
        "corl_vl.data.rephrase": {*modules["corl_vl.data.rephrase"], "corl_vl.eval.generate"},
    }
    assert cycles(injected) == []  # no module cycle …
    assert any(
        {"corl_vl.data", "corl_vl.eval"} <= set(c) for c in cycles(package_graph(injected))
    )  # … a package one


def test_no_package_cycle_counting_imports_inside_functions():
    found = cycles(package_graph(module_graph()))
    assert found == [], "move the shared piece below both packages (docs/architecture.md, Layering)"


def test_model_adapters_imports_inside_functions_only_heavy_dependencies():
    """A function-level import in model_adapters/ exists to keep torch, transformers or vLLM off a light path."""
    light = []
    for path in ROOT.glob("model_adapters/**/*.py"):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom) and (
                        node.level or node.module.split(".")[0] not in HEAVY
                    ):
                        light.append(f"{path.relative_to(ROOT)}:{node.lineno}")
                    if isinstance(node, ast.Import) and any(
                        a.name.split(".")[0] not in HEAVY for a in node.names
                    ):
                        light.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert light == []


def test_base_reaches_no_checkpoint_builder():
    """The adapter interface loads no family and no tiny or full-size builder, not even inside a function."""
    graph = module_graph()
    reached, pending = set(), ["model_adapters.base"]
    while pending:
        for target in graph.get(pending.pop(), ()):
            if target not in reached:
                reached.add(target)
                pending.append(target)
    assert not reached & {"model_adapters.tiny", "model_adapters.full_size", "model_adapters.presets"}


# --------------------------------------------------------------------------------------------------------------
# A function-level import says why it is not at the top of its module (docs/architecture.md, "Imports"):
# `# lazy: REASON[, REASON…] (optional words)` on its line, or on the line above its run of imports.
# --------------------------------------------------------------------------------------------------------------

LAZY_REASONS = {
    # a heavy or optional third-party package the import loads and the module otherwise does not
    *{"datasets", "deepspeed", "huggingface_hub", "jinja2", "math_verify", "matplotlib", "numpy", "peft"},
    *{"PIL", "pyarrow", "qwen_vl_utils", "rich", "safetensors", "scipy", "tensorboard", "tokenizers"},
    *{"torch", "torchvision", "transformers", "vllm", "wandb"},
    "config-path",  # keeps `import corl_vl.config` at a few modules (test above)
    "cli-help",  # keeps `corl-vl --help` from loading what one command needs
}


def _lazy_reason(lines: list[str], body: list[ast.stmt], node: ast.stmt) -> list[str] | None:
    """The reasons a function-level import states, or None when it states none."""
    texts = [lines[node.lineno - 1]]  # its own line, then the comment lines heading it or an import above it
    i = body.index(node)
    while True:
        texts.append(lines[body[i].lineno - 2].strip())
        if (
            texts[-1].startswith("# lazy:")
            or i == 0
            or not isinstance(body[i - 1], ast.Import | ast.ImportFrom)
        ):
            break
        i -= 1
    for text in texts:
        if "# lazy:" in text:
            reasons = text.split("# lazy:", 1)[1].split("(", 1)[0]
            return [r.strip() for r in reasons.split(",")]
    return None


def unexplained_imports_in_functions(path: Path) -> list[str]:
    """``path:line`` of each import inside a function without a known ``# lazy:`` reason."""
    lines = path.read_text().splitlines()
    tree = ast.parse("\n".join(lines))
    skip = _type_checking_nodes(tree)
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for owner in ast.walk(fn):
            for field in ("body", "orelse", "finalbody", "handlers"):
                body = getattr(owner, field, None)
                for node in body if isinstance(body, list) else []:
                    if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skip:
                        reasons = _lazy_reason(lines, body, node)
                        if not reasons or not set(reasons) <= LAZY_REASONS:
                            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {reasons}")
    return sorted(set(found))


def test_unexplained_imports_in_functions_are_found(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "m.py").write_text(
        "def f():\n"
        "    import json\n"  # no reason
        "    # lazy: torch\n"
        "    import torch\n"
        "    import transformers\n"  # covered by the comment above its run
        "    from x import y  # lazy: because\n"  # not a known reason
        "    if True:\n"
        "        import PIL  # lazy: PIL (only here)\n"
    )
    assert unexplained_imports_in_functions(tmp_path / "m.py") == ["m.py:2 None", "m.py:6 ['because']"]


def test_every_import_in_a_function_states_why():
    found = [
        line
        for path in [*ROOT.glob("corl_vl/**/*.py"), *ROOT.glob("model_adapters/**/*.py")]
        for line in unexplained_imports_in_functions(path)
    ]
    assert found == [], "move these to the module top, or say `# lazy: REASON` (docs/architecture.md)"
