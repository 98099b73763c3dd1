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
from dataclasses import dataclass, fields, is_dataclass
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


@dataclass(frozen=True)
class Limit:
    """The range one size or number may take, wherever it enters: a flag, a config file, a control, a shared link
    or an API call. `app` is the app's own range (its controls, its links and its API, whose sessions share one
    model), where it is narrower than what a command on one's own machine may ask."""

    what: str  # how messages name it, e.g. "group size G"
    low: int | float
    high: int | float
    app: tuple[int | float, int | float] | None = None  # (low, high) in the app; None = (low, high)

    def range(self, app: bool = False) -> tuple[int | float, int | float]:
        return self.app if app and self.app is not None else (self.low, self.high)


LIMITS = {  # the one table of limits: the CLI, the configs, the app's controls, its links and its API read it
    "group": Limit("group size G", 1, 256, app=(2, 16)),  # G >= 2 where advantages compare a group's samples
    "steps": Limit("steps T", 1, 200, app=(2, 32)),
    "continuations": Limit("continuations M", 1, 4096, app=(1, 16)),
    "budget": Limit("budget (continuations)", 1, 10_000),  # one Refine press: ~20 default measurements
    "inner_updates": Limit("inner updates N", 0, 10),
    "noise_level": Limit("noise level", 0.0, 10.0, app=(0.0, 1.5)),
    "shift": Limit("shift", 1e-3, 1000.0),
    "guidance_scale": Limit("guidance scale", 0.0, 100.0),
    "seed": Limit("seed", 0, 2**63 - 1),
    "prompts_per_iteration": Limit("prompts per iteration", 1, 4096),
    "iterations": Limit("iterations", 1, 1_000_000),
    "eval_prompts": Limit("held-out prompts", 0, 200),
    "lora_rank": Limit("LoRA rank", 0, 1024),
    "inner_epochs": Limit("inner epochs", 1, 100),
    "max_sample_rounds": Limit("sample rounds", 1, 1000),
    "keep_checkpoints": Limit("checkpoints kept", 1, 1000),
    "threads": Limit("CPU threads", 1, 1024),
}


def shown(value) -> str:
    """A limit or a value as a message writes it: 2^63 - 1 by name, whole numbers whole, others shortest."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return shorten(value)
    if value == 2**63 - 1:
        return "2^63 - 1"
    if isinstance(value, int):
        return str(value) if abs(value) < 10**16 else f"{value:.3g}"
    return f"{value:g}"


def check_limit(name: str, value, app: bool = False, what: str | None = None) -> None:
    """A number `value` within LIMITS[name] (app=True: the app's range); else a WorkbenchError naming the field
    (`what`, default the table's name for it) and its limits."""
    limit = LIMITS[name]
    low, high = limit.range(app)
    if not low <= value <= high:
        where = " in the app (the `workbench` command takes larger sizes)" if app and high < limit.high else ""
        raise WorkbenchError(f"{what or limit.what} must be in {shown(low)}..{shown(high)}{where}, got {shown(value)}")
