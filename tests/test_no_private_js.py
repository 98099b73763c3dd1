"""No JavaScript in the repository reads Plotly's or Gradio's private state or routes.

Such a script breaks silently on the next release of either: the page's figures and quick events are built on
gr.HTML's documented hooks instead (workbench/ui/figures.py). Scanned: every .js and .html file of the repository,
every string in its Python files that reads as JavaScript (an arrow function, `document.`, `window.`, `element.`,
...), the app's, the tests' and the scripts' alike, and in its notebooks the same strings in code cells, the
`<script>` blocks of markdown cells and any HTML or JavaScript output a notebook carries. Public plotly.js calls
(`Plotly.newPlot`, `.on('plotly_click')`, a figure's `layout`) and Gradio's documented file route are allowed.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {  # pattern -> what it reaches into
    r"\.\s*_[A-Za-z]\w*": "a leading-underscore field (plotly's _fullLayout, _fullData, axes' _offset, ...)",
    r"\.(l2p|p2l|d2p|p2d|c2p|p2c|l2c|c2l)\b": "a plotly axis's private conversion function",
    r"gradio_api/(run|queue|call|component_server)\b": "a Gradio route its own page posts to (use an event)",
    r"__gradio\w*": "a Gradio page global such as __gradio_session_hash__",
    r"PlotlyPlot-|statustracker|[\"'`/]assets/\w": "a Gradio frontend asset, by the name its build gave it",
    r"(window\.)?Plotly(\.\w+)*\s*=[^=>]|defineProperty\(\s*window\s*,\s*[\"']Plotly": "plotly patched",
    r"requestAnimationFrame\s*=[^=>]": "the browser's frame scheduling patched (Gradio's loops with it)",
}
JS_HINTS = re.compile(r"=>|\bdocument\.|\bwindow\.|\belement\.|\bfunction\s*\(|querySelector|addEventListener")
FRONTEND_BUILD = re.compile(r"PlotlyPlot-|[\"']templates[\"']\s*/\s*[\"']frontend|templates/frontend")
SELF = Path(__file__).resolve()


def repository_files() -> list[Path]:
    """The tracked files and the new ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\n")
    return [ROOT / name for name in listed if name and (ROOT / name).is_file()]


def strings_in(source: str, line: int = 1) -> list[tuple[int, str]]:
    """(line, text) of each string constant of Python source that reads as JavaScript; source that does not parse
    (a notebook cell with a magic) is read as a whole."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [(line, source)] if JS_HINTS.search(source) else []
    return [(line + node.lineno - 1, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and JS_HINTS.search(node.value)]


def notebook_scripts(text: str) -> list[tuple[int, str]]:
    """(cell number, text) of the JavaScript a notebook holds: its code cells' strings, its markdown's <script>
    blocks, its HTML and JavaScript outputs."""
    found = []
    for number, cell in enumerate(json.loads(text)["cells"], 1):
        source = "".join(cell["source"])
        if cell["cell_type"] == "code":
            found += [(number, script) for _, script in strings_in(source)]
        else:
            found += [(number, script) for script in re.findall(r"<script.*?</script>", source, re.S | re.I)]
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            found += [(number, "".join(data[kind])) for kind in ("text/html", "application/javascript")
                      if kind in data]
    return found


def scripts_in(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each piece of JavaScript in a file: a .py file's strings that read as JavaScript, a .js or
    .html file as a whole, a notebook's (`notebook_scripts`, numbered by cell)."""
    source = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix in (".js", ".html"):
        return [(1, source)]
    if path.suffix == ".ipynb":
        return notebook_scripts(source)
    return strings_in(source)


def private_uses(script: str) -> list[str]:
    """What a script reaches into: the FORBIDDEN entries it matches, with the text matched."""
    return [f"{what} ({match.group(0).strip()!r})" for pattern, what in FORBIDDEN.items()
            for match in [re.search(pattern, script)] if match]


def test_no_script_of_the_repository_reads_private_state():
    found = []
    for path in repository_files():
        if path.suffix not in (".py", ".js", ".html", ".ipynb") or path.resolve() == SELF:
            continue
        for line, script in scripts_in(path):
            found += [f"{path.relative_to(ROOT)}:{line}: {use}" for use in private_uses(script)]
    assert not found, "\n".join(found)


def test_no_python_file_looks_into_gradios_frontend_build():
    """The Python side that found a script's asset by globbing gradio's package (ui/redraw.py's `plotly_chunk`)."""
    found = [f"{path.relative_to(ROOT)}: {match.group(0)!r}" for path in repository_files()
             if path.suffix == ".py" and path.resolve() != SELF
             for match in [FRONTEND_BUILD.search(path.read_text(encoding="utf-8", errors="replace"))] if match]
    assert not found, "\n".join(found)


def test_the_frontend_build_rule_finds_the_old_glob():
    old = 'list((Path(gradio.__file__).parent / "templates" / "frontend" / "assets").glob("PlotlyPlot-*.js"))'
    assert FRONTEND_BUILD.search(old)


OLD = {  # the scripts this rule replaced (ui/redraw.py, ui/direct.py, ui/frames.py, ui/clicks.py, their tests)
    "plotly's full layout": "() => { if (!gd._fullLayout) return; gd.wbFigure = undefined; }",
    "an axis's pixels": "(v) => xa._offset + xa.l2p(v)",
    "a trace's axis": "() => gd._fullData.find((t) => t.name === name)",
    "Gradio's run route": "async () => fetch(new URL(`gradio_api/run/${api}`, document.baseURI), {method: 'POST'})",
    "Gradio's session": "() => ({session_hash: window.__gradio_session_hash__})",
    "Gradio's asset": "() => import(new URL('assets/PlotlyPlot-D9Pvz5DK.js', document.baseURI).href)",
    "Gradio's asset, named later": "() => idle(() => import(new URL(\"assets/CHUNK\", document.baseURI).href))",
    "Gradio's tracker": "() => (new Error().stack || '').includes('/statustracker-')",
    "plotly patched": "(P) => { P.react = (gd, data) => later(gd); window.Plotly = P; }",
    "plotly patched, property": "() => Object.defineProperty(window, 'Plotly', {set: (v) => patch(v)})",
    "frames patched": "() => { window.requestAnimationFrame = (callback) => ask(callback); }",
}


@pytest.mark.parametrize("script", OLD.values(), ids=OLD.keys())
def test_the_scan_finds_each_kind_of_private_use(script):
    assert JS_HINTS.search(script) and private_uses(script), script


def test_public_calls_pass():
    for script in ("(gd) => Plotly.newPlot(gd, data, layout).then(() => gd.on('plotly_click', (e) => e.points[0].x))",
                   "(link) => { if (link !== window.location.href) window.history.replaceState(null, '', link); }",
                   "element.addEventListener('click', (e) => trigger('toggle', {step: 2}))",
                   "() => fetch(new URL('gradio_api/file=/fonts/math.woff2', document.baseURI))",
                   "() => requestAnimationFrame(() => (window.wbLatency = 1))"):
        assert not private_uses(script), script


def test_a_notebook_is_read_cell_by_cell():
    cells = [{"cell_type": "code", "source": ["%matplotlib inline\n", "x = 1"], "outputs": [
                 {"output_type": "display_data", "data": {"text/html": ["<script>gd._fullLayout</script>"]}}]},
             {"cell_type": "markdown", "source": ["<script>fetch('gradio_api/run/x')</script>"]},
             {"cell_type": "code", "source": ["HTML('<script>window.__gradio_session_hash__</script>')"],
              "outputs": []}]
    found = notebook_scripts(json.dumps({"cells": cells}))
    assert [cell for cell, script in found if private_uses(script)] == [1, 2, 3]


def test_gradio_is_pinned_to_the_minor_version_the_tests_run_on():
    """pyproject allows one minor version of gradio (and of the gradio_client it brings), the one installed here:
    the page's hooks are checked on it, and the next minor version is taken only after the tests ran on it."""
    import gradio
    import gradio_client

    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]]
    for name, installed in (("gradio", gradio.__version__), ("gradio_client", gradio_client.__version__)):
        [spec] = [r.specifier for r in declared if r.name == name]
        minor = Version(installed).release[:2]
        assert installed in spec, f"{name} {installed} is installed, pyproject asks for {spec}"
        assert f"{minor[0]}.{minor[1] + 1}" not in spec and f"{minor[0]}.{minor[1] - 1}.99" not in spec, (
            f"{name}: pyproject allows other minor versions than {minor} ({spec})")
