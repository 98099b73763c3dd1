#!/usr/bin/env bash
# Create .venv at the repository root and install the workbench into it (editable).
#   scripts/setup.sh        the app and library
#   scripts/setup.sh --dev  plus the test tools, and Debian's chromium-headless-shell and chromium (when root)
# torch is pinned: on a machine without CUDA set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu to get the
# small CPU build. Wheels in PIP_FIND_LINKS (a local folder) are used as pip would use them.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0; [ "${1:-}" = "--dev" ] && dev=1
PY=${PYTHON:-python3}
TORCH="torch==2.13.0"
# uv when it can be had (parallel installs from its cache: the whole stack in ~5 s here, pip takes ~55 s); pip
# otherwise. The venv starts without pip and the system's pip puts uv into it: a venv with its own pip took 5 s
# to create here, this takes 2.5 s, and uv then adds the pip the tests build a wheel with in 0.3 s.
[ -x .venv/bin/python ] || "$PY" -m venv --without-pip .venv
[ -x .venv/bin/uv ] || "$PY" -m pip --python .venv/bin/python install -q uv >/dev/null 2>&1 || true
if [ ! -x .venv/bin/uv ] && [ ! -x .venv/bin/pip ]; then  # no pip outside (or too old for --python)
  .venv/bin/python -m ensurepip -q >/dev/null && { .venv/bin/pip install -q uv >/dev/null 2>&1 || true; }
fi
# uv reads no pip configuration, so the local wheel folders and torch's index are passed on.
links=(); for folder in ${PIP_FIND_LINKS:-}; do links+=(--find-links "$folder"); done
install() {
  if [ -x .venv/bin/uv ] && .venv/bin/uv pip install -q --python .venv/bin/python ${links[@]+"${links[@]}"} "$@"; then
    return
  fi
  .venv/bin/pip install -q "$@"
}
[ -x .venv/bin/pip ] || install pip
# The bytecode is written as each module is compiled; os._exit skips the interpreter's teardown (~0.8 s for the web
# side below).
bytecode() { env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -c "import os, $1; os._exit(0)" >/dev/null; }
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "setup: installing torch"
  if [ -n "${TORCH_INDEX_URL:-}" ]; then install "$TORCH" --index-url "$TORCH_INDEX_URL"; else install "$TORCH"; fi
  bytecode torch 2>/dev/null & torch_bytecode=$!  # beside the install of the rest (see below; numpy comes later)
fi
stamp=.venv/.installed-$dev
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing the workbench into .venv"
  if [ "$dev" = 1 ]; then install -e ".[dev]"; else install -e .; fi
  # jsonschema's optional IRI format checker, rfc3987-syntax (jupyter-events asks for jsonschema[format-nongpl]),
  # builds a Lark parser when jsonschema loads: 1.5 s in every process that imports nbformat, among them each
  # notebook kernel (plotly's widgets) and every pytest process (nbmake). No schema of the workbench, nbformat or
  # Jupyter uses the "iri" formats, and jsonschema leaves out a checker it cannot import (`pip check` stays clean).
  if [ -x .venv/bin/uv ]; then .venv/bin/uv pip uninstall -q --python .venv/bin/python rfc3987-syntax
  else .venv/bin/pip uninstall -y -q rfc3987-syntax; fi 2>/dev/null || true
  # Bytecode for what the app and the tests' workers import, written by importing it once: where
  # PYTHONDONTWRITEBYTECODE is set (this machine class) nothing is ever cached, and every process would compile
  # torch, gradio and diffusers again (their import 20 s instead of 8). Compiling every installed file instead
  # (uv's --compile-bytecode) took 38 s: most of transformers and plotly is never imported. torch's is written
  # during the install above; then two processes that share no big package, the model side (diffusers, peft,
  # transformers) and the web side (gradio, the test tools, the app), so torch is no longer compiled twice (with
  # the pip-less venv: set-up 28.5 -> 21 s on a fresh clone). scripts/test.sh writes the rest's as the tests run.
  # pandas (gradio's, ~2 s to compile) goes to the model side, first, and gradio comes after the test tools: the
  # two sides took 8 and 11-12 s, now ~8.5 and ~10 (fresh bytecode caches, 2026-12-03).
  [ -n "${torch_bytecode:-}" ] && wait "$torch_bytecode"
  bytecode "pandas, workbench.cli.main, workbench.train, diffusers" & models=$!
  web="app, workbench.ui.layout, workbench.ui.workbench"
  [ "$dev" = 1 ] && web="pytest, xdist, playwright.sync_api, nbmake, nbclient, ipykernel.kernelapp, gradio, $web"
  bytecode "$web"
  wait "$models"
  touch "$stamp"
fi
# The browser tests run Debian's chromium-headless-shell (tests/browser_support.py: ~30 % less CPU than the full
# browser); bench/browser.py and bench/figures.py time the full chromium, the browser a learner uses.
browsers=()
[ -x /usr/bin/chromium-headless-shell ] || browsers+=(chromium-headless-shell)
[ -x /usr/bin/chromium ] || browsers+=(chromium)
if [ "$dev" = 1 ] && [ "${#browsers[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing Debian ${browsers[*]} for the browser tests and benchmarks"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${browsers[@]}" >/dev/null; }; then
      # one of the two is enough for the tests (tests/browser_support.py takes the shell, else chromium)
      [ -x /usr/bin/chromium-headless-shell ] || [ -x /usr/bin/chromium ] || exit 1
      echo "setup: apt-get could not install ${browsers[*]}; the browser tests use the browser that is there"
    fi
  else
    echo "setup: not root: install ${browsers[*]} (apt-get) for the browser tests and benchmarks"
  fi
fi
echo "setup: .venv ready"
