"""The repository's shape: modules stay short, workbench/ has no import circle, and the package imports nothing from
outside workbench/ (the experiments, benchmarks, scripts and tests import the package, never the other way round).
Layers are checked in tests/test_layers.py."""

from __future__ import annotations

import ast
from pathlib import Path

import workbench

PACKAGE = Path(workbench.__file__).resolve().parent
REPO = PACKAGE.parent
MAX_LINES = 450

# Modules over MAX_LINES today, each to be split. This list must only shrink: remove a module once it is split, and
# never add one (split the module instead).
TOO_LONG_TODAY = {
    "bench/browser.py",
    "bench/report.py",
}

# Folders of the repository whose Python files the size rule covers: the code. Test files hold the cases of one
# concept each and are not held to it.
CHECKED = ("workbench", "bench", "experiments", "scripts")


def python_files() -> list[Path]:
    files = [REPO / "app.py"]
    for folder in CHECKED:
        files += sorted((REPO / folder).rglob("*.py"))
    return [f for f in files if f.is_file()]


def test_no_module_is_over_the_limit():
    long = {f.relative_to(REPO).as_posix(): n for f in python_files()
            if (n := len(f.read_text().splitlines())) > MAX_LINES}
    new = {path: n for path, n in long.items() if path not in TOO_LONG_TODAY}
    assert not new, f"over {MAX_LINES} lines (split them): {new}"


def test_the_allow_list_of_long_modules_only_shrinks():
    """A module of the list that is now short (or gone) must leave the list, so that it cannot grow back."""
    fixed = [path for path in TOO_LONG_TODAY
             if not (REPO / path).is_file() or len((REPO / path).read_text().splitlines()) <= MAX_LINES]
    assert not fixed, f"now within {MAX_LINES} lines: remove from TOO_LONG_TODAY: {fixed}"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The workbench modules a file imports, at top level or inside functions: `from a.b import c` counts as a.b.c
    where that is a module, else as a.b. A package's own __init__ is not counted for its submodules' imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found & known


def import_graph() -> dict[str, set[str]]:
    files = {module_name(f): f for f in sorted(PACKAGE.rglob("*.py"))}
    known = set(files)
    return {name: imported_modules(path, known) - {name} for name, path in files.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_in_the_package():
    assert circles(import_graph()) == []


def test_the_circle_check_sees_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def outside_modules() -> set[str]:
    """Top-level names a file outside the package could be imported as: the repository's folders and their
    Python files (a script's folder is on sys.path when it runs), app.py."""
    names = {"app", "tests", "bench", "experiments", "scripts", "notebooks"}
    for folder in ("tests", "bench", "experiments", "scripts"):
        names |= {f.stem for f in (REPO / folder).rglob("*.py")}
    return names - {"__init__"}


def test_the_package_imports_nothing_from_outside_it():
    outside = outside_modules()
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bad += [f"{path.relative_to(REPO)} imports {n}" for n in names if n.split(".")[0] in outside]
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
                bad.append(f"{path.relative_to(REPO)} touches sys.path")
    assert not bad, "\n".join(bad)


def test_no_test_module_imports_another():
    """Shared helpers live in conftest.py (fixtures) and helper modules (tests/support.py, app_support.py,
    browser_support.py, tiny_pipelines.py, notebook_waits.py): a test file imports none of the test files."""
    bad = []
    for path in sorted((REPO / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if isinstance(node, ast.ImportFrom) and node.module == "tests":
                names = [f"tests.{a.name}" for a in node.names]
            bad += [f"{path.name} imports {n}" for n in names if n.split(".")[-1].startswith("test_")
                    or n.startswith("tests.")]
    assert not bad, "\n".join(bad)


# Fixtures a file overrides on purpose with its own variant of the shared one (pytest's override by name): `wb` on a
# model with a run or on a tiny SD3, `app` built with other folders.
SHADOWED_ON_PURPOSE = {"wb", "app"}


def fixtures_defined(source: str) -> set[str]:
    """The names of the module-level functions decorated with pytest.fixture in one test file."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list):
            names.add(node.name)
    return names


def test_a_fixture_several_files_use_is_defined_once():
    """A fixture defined in two test files is one to move to conftest.py (`sd3_dir` was defined four times)."""
    seen: dict[str, list[str]] = {}
    for path in sorted((REPO / "tests").glob("test_*.py")):
        for name in fixtures_defined(path.read_text()):
            seen.setdefault(name, []).append(path.name)
    twice = {name: files for name, files in seen.items() if len(files) > 1 and name not in SHADOWED_ON_PURPOSE}
    assert not twice, twice


def test_the_fixture_check_sees_a_fixture():
    assert fixtures_defined("import pytest\n@pytest.fixture(scope='module')\ndef sd3_dir(t):\n    pass\n"
                            "def helper():\n    pass\n") == {"sd3_dir"}


def test_no_import_circle_among_the_experiments_and_benchmarks():
    """Scripts import their folder's modules by name (`from common import ...`): none in a circle."""
    for folder in ("experiments", "bench"):
        files = {f.stem: f for f in sorted((REPO / folder).glob("*.py"))}
        graph = {name: imported_modules(path, set(files)) - {name} for name, path in files.items()}
        assert circles(graph) == [], folder


def test_the_readme_is_short_and_its_links_resolve():
    """A newcomer reads the README in five minutes: under 200 lines, and every relative link names a file."""
    import re

    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    targets = re.findall(r"\]\(([^)#\s]+)", readme)
    missing = [t for t in targets if not t.startswith("http") and not (REPO / t).exists()]
    assert targets and not missing, missing


def test_docs_links_resolve():
    import re

    missing = []
    for page in sorted((REPO / "docs").glob("*.md")):
        for target in re.findall(r"\]\(([^)#\s]+)", page.read_text()):
            if not target.startswith(("http", "mailto:")) and not (page.parent / target).exists():
                missing.append(f"{page.name}: {target}")
    assert not missing, missing



HISTORY = r"20\d\d-\d\d-\d\d|\bissue \d+|perf-data|\bturn[- ]\d\b"  # dates, issue numbers, the lab's notebook


def test_the_package_says_what_and_why_not_its_history():
    """Dated timings and issue narratives belong in docs/ (STYLE.md): the code's text names none."""
    import re

    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(HISTORY, line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:80]}")
    assert not found, "\n".join(found)


def test_the_history_check_sees_history():
    import re

    assert re.search(HISTORY, "measured 2026-12-02 07:08") and re.search(HISTORY, "(issue 24)")
    assert not re.search(HISTORY, "the group's 24 images")
