"""Typed dataclasses from YAML: build a dataclass tree from a mapping, coerce each value to its field's type,
set one dotted key (``--set a.b=c``).

Why its own module: the checks are generic (any dataclass tree), while :mod:`corl_vl.config` holds what the
cohort's settings *are*. Every failure is a :class:`CorlError` naming the key and where it came from.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
from typing import Any

import yaml

from corl_vl.errors import CorlError


def build_dataclass(cls: type, raw: Any, prefix: str, source: str) -> Any:
    """Instantiate dataclass ``cls`` from a mapping, rejecting unknown keys, coercing values."""
    where = prefix.rstrip(".") or "the top level"
    if not isinstance(raw, dict):
        raise CorlError(f"{where}: expected a mapping, got {type(raw).__name__} (in {source})")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise CorlError(
            f"unknown key '{prefix}{unknown[0]}' (in {source}); known keys here: {', '.join(sorted(known))}"
        )
    kwargs = {name: coerce(hints[name], value, f"{prefix}{name}", source) for name, value in raw.items()}
    return cls(**kwargs)


def coerce(tp: Any, value: Any, key: str, source: str) -> Any:
    """Convert a YAML value to type ``tp`` or raise a CorlError naming ``key``."""

    def bad() -> CorlError:
        return CorlError(f"{key}: expected {type_name(tp)}, got {value!r} (in {source})")

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return coerce(arg, value, key, source)
            except CorlError:
                continue
        raise bad()
    if dataclasses.is_dataclass(tp):
        return build_dataclass(tp, value, f"{key}.", source)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad()
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise bad()
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML reads "1e-6" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                raise bad() from None
        raise bad()
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, (datetime.date, datetime.datetime)):  # YAML reads 2024-07-26 as a date
            return value.isoformat()
        raise bad()
    if origin is list:
        if not isinstance(value, list):
            raise bad()
        return [coerce(args[0], v, f"{key}.{i}", source) for i, v in enumerate(value)]
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise bad()
        return tuple(coerce(a, v, f"{key}.{i}", source) for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, dict):
            raise bad()
        return {str(k): coerce(args[1], v, f"{key}.{k}", source) for k, v in value.items()}
    raise bad()


def type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    if tp is type(None):
        return "null"
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]"
    return getattr(tp, "__name__", str(tp))


def set_path(obj: Any, parts: list[str], value: Any, key: str) -> None:
    """Walk ``parts`` through dataclasses/lists/dicts and set the final one, typed by the dataclass field."""
    head, rest = parts[0], parts[1:]
    where = f"--set {key}"
    if isinstance(obj, list):
        index = list_index(obj, head, key)
        if not rest:
            raise CorlError(f"{where}: cannot replace a whole list element; set one of its fields")
        set_path(obj[index], rest, value, key)
        return
    if isinstance(obj, dict):
        if rest:
            set_path(obj.setdefault(head, {}), rest, value, key)
        else:
            obj[head] = value
        return
    if not dataclasses.is_dataclass(obj):
        raise CorlError(f"{where}: '{head}' does not name a field")
    names = {f.name for f in dataclasses.fields(obj)}
    if head not in names:
        raise CorlError(f"{where}: unknown key '{head}'; known keys here: {', '.join(sorted(names))}")
    tp = typing.get_type_hints(type(obj))[head]
    if rest:
        current = getattr(obj, head)
        if isinstance(current, dict):
            inner = typing.get_args(tp)[1] if typing.get_args(tp) else Any
            current[rest[0]] = coerce(inner, value, key, "--set") if len(rest) == 1 else value
            return
        set_path(current, rest, value, key)
        return
    setattr(obj, head, coerce(tp, value, key, "--set"))


def list_index(items: list[Any], head: str, key: str) -> int:
    """``agents.0`` or ``agents.<name>``."""
    if head.isdigit() and int(head) < len(items):
        return int(head)
    for i, item in enumerate(items):
        if getattr(item, "name", None) == head:
            return i
    raise CorlError(f"--set {key}: no element '{head}' (use an index below {len(items)} or an agent name)")


# ------------------------------------------------------------------------------------------- bounded loading
MAX_YAML_NODES = 100_000  # values in the document once every alias is expanded
MAX_YAML_DEPTH = 64


def load_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load`` of ``text``, refusing documents whose aliases expand past :data:`MAX_YAML_NODES`
    values or nest past :data:`MAX_YAML_DEPTH` levels (``where`` names the file in the one-line error).

    Why: a few lines of nested aliases (a "billion laughs") load as a small shared graph, but everything that
    walks the result as a tree (``dataclasses.asdict``, ``yaml.safe_dump`` of the run record) expands it
    exponentially: minutes of CPU, then a ``MemoryError``. The size is counted on the composed nodes, with each
    node's expanded size memoised, so the check itself is linear in the document. Parse errors pass through as
    ``yaml.YAMLError`` for the caller to report.
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, where)
        return loader.construct_document(node)
    except RecursionError:  # the composer recurses per level: thousands of "[" exhaust the stack first
        raise CorlError(f"{where}: nested deeper than {MAX_YAML_DEPTH} levels") from None
    finally:
        loader.dispose()


def _check_expansion(root: Any, where: str) -> None:
    sizes: dict[int, tuple[int, int]] = {}  # id(node) → (expanded values, depth)
    open_nodes: set[int] = set()

    def visit(node: Any) -> tuple[int, int]:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise CorlError(f"{where}: a YAML alias refers to itself (a recursive structure); remove it")
        open_nodes.add(key)
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        count, depth = 1, 1
        for child in children:
            child_count, child_depth = visit(child)
            count, depth = count + child_count, max(depth, child_depth + 1)
            if count > MAX_YAML_NODES:
                raise CorlError(
                    f"{where}: more than {MAX_YAML_NODES:,} values once its aliases are expanded; a config this "
                    "large is an alias bomb or a mistake"
                )
            if depth > MAX_YAML_DEPTH:
                raise CorlError(f"{where}: nested deeper than {MAX_YAML_DEPTH} levels")
        open_nodes.discard(key)
        sizes[key] = (count, depth)
        return count, depth

    visit(root)
