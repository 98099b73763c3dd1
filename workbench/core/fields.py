"""Settings dataclasses as the one source of truth: their field docstrings and their field types.

A config dataclass documents each field with a string right under it (one docstring line per field with
meaning, unit and source). The command line's --help and the app's control hints read them here, so a
field's description is written once; `check_types` refuses values of the wrong type (or non-finite
numbers) wherever a config comes from: flags, app controls, a JSON file.
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
from dataclasses import fields, is_dataclass
from functools import cache

from workbench.core.errors import WorkbenchError, shorten


@cache
def field_docs(cls: type) -> dict[str, str]:
    """{field name: its docstring, whitespace collapsed} for the fields of `cls` that have one."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # the class body
    docs = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


_KINDS = {"int": "an integer", "float": "a finite number", "str": "a string", "bool": "true or false",
          "list[str]": "a list of strings", "tuple[int, int]": "a pair of integers", "dict": "a JSON object"}


def _fits(kind: str, value) -> bool:
    if " | " in kind:  # a union such as "int | str": any of its kinds
        return any(_fits(part, value) for part in kind.split(" | "))
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "list[str]":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "tuple[int, int]":
        return isinstance(value, (tuple, list)) and len(value) == 2 and all(_fits("int", v) for v in value)
    if kind == "dict":
        return isinstance(value, dict)
    if is_dataclass(value) and type(value).__name__ == kind:  # a nested settings dataclass (checks itself)
        return True
    if kind[:1].isupper():  # a nested dataclass's annotation, given something else
        return False
    raise TypeError(f"no type check for annotation {kind!r}")


def check_types(obj) -> None:
    """Every field of a dataclass instance has its annotated type (floats finite); else a WorkbenchError
    naming the field, e.g. "lr must be a finite number, got nan". Annotations are read as strings."""
    for f in fields(obj):
        kind, optional = f.type.removesuffix(" | None"), f.type.endswith(" | None")
        value = getattr(obj, f.name)
        if value is None and optional:
            continue
        if not _fits(kind, value):
            what = " or ".join(_KINDS.get(k, f"a {k} (an object of settings)") for k in kind.split(" | "))
            raise WorkbenchError(f"{f.name} must be {what}{' or None' if optional else ''}, got {shorten(value)}")
