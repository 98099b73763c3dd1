"""No Python code of the product sets or reads a private attribute of a gradio object.

The sibling of tests/test_no_private_js.py for the server side: a leading-underscore attribute of gradio's (the
queue's `demo._queue`, an event's `_id`, ...) can change in any release without notice. Scanned: app.py and every
module of workbench/. A private name is one gradio's own source keeps on `self` (`self._queue = ...`), read through
anything but `self`/`cls` (`demo._queue`, `getattr(blocks, "_queue")`), or any underscore name reached through the
`gr`/`gradio` module (`gr.Blocks._x`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Known uses with no documented equivalent in Gradio 6.31, each with its reason; the test fails once one goes (so the
# entry goes with it) and on any use not listed here.
KNOWN = {
    ("workbench/ui/guard.py", "_queue"): "cancel_check: Gradio documents no way for a running handler's thread to "
                                         "learn that its event was cancelled (page closed); it reads the queue's "
                                         "active jobs",
    ("workbench/ui/guard.py", "_id"): "cancel_check: the ids of the events the queue still runs",
}


def gradio_private_names() -> set[str]:
    """The single-underscore attribute names gradio's own source keeps on its objects (`self._name`)."""
    import gradio

    names: set[str] = set()
    for path in Path(gradio.__file__).parent.rglob("*.py"):
        names |= set(re.findall(r"\bself\.(_[A-Za-z]\w*)", path.read_text(errors="ignore")))
    return {name for name in names if not name.startswith("__")}


def private_uses(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, attribute) of each use in `source` of a private gradio attribute: `x._name` with `x` not self or cls,
    `getattr`/`setattr`/`hasattr` with the name as a string, or any `_name` reached through `gr.` or `gradio.`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            through_module = isinstance(root, ast.Name) and root.id in ("gr", "gradio")
            on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if through_module or (node.attr in names and not on_self):
                found.append((node.lineno, node.attr))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and node.args[1].value in names):
            found.append((node.lineno, node.args[1].value))
    return found


@pytest.fixture(scope="module")
def names():
    return gradio_private_names()


def test_the_product_touches_no_private_gradio_attribute(names):
    seen, bad = set(), []
    for path in [ROOT / "app.py", *sorted((ROOT / "workbench").rglob("*.py"))]:
        where = path.relative_to(ROOT).as_posix()
        for line, attr in private_uses(path.read_text(), names):
            if (where, attr) in KNOWN:
                seen.add((where, attr))
            else:
                bad.append(f"{where}:{line} {attr}")
    assert not bad, bad
    assert seen == set(KNOWN), set(KNOWN) - seen  # a listed use that went: drop it from KNOWN


@pytest.mark.parametrize("source", [
    "demo._queue.sleep_when_free = 0.01",  # what layout.queued did
    "q = demo._queue",
    "x = getattr(blocks, '_queue', None)",
    "setattr(demo, '_queue', q)",
    "gr.Blocks._something = 1",
    "event._id == 3",
])
def test_the_scan_finds_each_kind_of_private_use(names, source):
    assert private_uses(source, names), source


@pytest.mark.parametrize("source", ["self._queue = 1", "demo.queue(default_concurrency_limit=2)",
                                    "wb._measure_curve(1)", "x.__class__", "getattr(x, 'label')"])
def test_public_uses_and_our_own_private_fields_pass(names, source):
    assert not private_uses(source, names), source
