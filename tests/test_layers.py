"""The package layout is layered: no module imports from a layer above its own, and cli and ui not from each other."""

from __future__ import annotations

import ast
from pathlib import Path

import workbench

ROOT = Path(workbench.__file__).resolve().parent


def layer_of(module: str) -> int | None:
    """Index of the layer a `workbench.<package>...` module belongs to (None for the top-level package)."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "workbench" or parts[1] in ("__init__", "__main__"):
        return None
    for i, layer in enumerate(workbench.LAYERS):
        if parts[1] in (layer if isinstance(layer, tuple) else (layer,)):
            return i
    raise AssertionError(f"{module} belongs to no layer of workbench.LAYERS")


def imports_of(path: Path) -> list[str]:
    """Every workbench module a file imports, at top level or inside functions."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("workbench"):
            found += [node.module] if node.module != "workbench" else [f"workbench.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("workbench")]
    return found


def modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        yield ".".join(rel.parts), path


def test_every_package_is_in_a_layer():
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    named = {n for layer in workbench.LAYERS for n in (layer if isinstance(layer, tuple) else (layer,))}
    assert packages == named


def test_imports_go_downwards_only():
    upward = []
    for name, path in modules():
        own = layer_of(name)
        if own is None:
            continue
        own_package = name.split(".")[1]
        for target in imports_of(path):
            other = layer_of(target)
            if other is None:
                continue
            if other > own or (other == own and target.split(".")[1] != own_package):
                upward.append(f"{name} imports {target}")
    assert not upward, "\n".join(upward)


def test_the_layer_check_sees_an_upward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from workbench.train.trainer import Trainer\n")
    assert imports_of(bad) == ["workbench.train.trainer"]
    assert layer_of("workbench.train.trainer") > layer_of("workbench.rl.credit")
