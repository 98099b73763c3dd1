"""Field docstrings of a dataclass, read from its source: the one place a setting is described.

A config dataclass documents each field with a string right under it (STYLE: one docstring line per field
with meaning, unit and source). The command line's --help and the app's control hints read them here, so
a field's description is written once.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import cache


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
