#!/usr/bin/env bash
# Create .venv at the repository root and install the workbench into it (editable).
#   scripts/setup.sh        the app and library
#   scripts/setup.sh --dev  plus the test tools, and Debian's chromium for the browser tests (when root)
# torch is pinned: on a machine without CUDA set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu to get the
# small CPU build. Wheels in PIP_FIND_LINKS (a local folder) are used as pip would use them.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0; [ "${1:-}" = "--dev" ] && dev=1
PY=${PYTHON:-python3}
TORCH="torch==2.13.0"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# uv when it can be had (parallel installs from its cache: the whole stack in ~12 s here, pip takes ~55 s); pip
# otherwise. uv reads no pip configuration, so the local wheel folders and torch's index are passed on.
[ -x .venv/bin/uv ] || .venv/bin/pip install -q uv >/dev/null 2>&1 || true
links=(); for folder in ${PIP_FIND_LINKS:-}; do links+=(--find-links "$folder"); done
install() {
  if [ -x .venv/bin/uv ] && .venv/bin/uv pip install -q --python .venv/bin/python ${links[@]+"${links[@]}"} "$@"; then
    return
  fi
  .venv/bin/pip install -q "$@"
}
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "setup: installing torch"
  if [ -n "${TORCH_INDEX_URL:-}" ]; then install "$TORCH" --index-url "$TORCH_INDEX_URL"; else install "$TORCH"; fi
fi
stamp=.venv/.installed-$dev
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing the workbench into .venv"
  if [ "$dev" = 1 ]; then install -e ".[dev]"; else install -e .; fi
  # Bytecode for what the app and the tests' workers import, written by importing it once in two processes (one
  # per half of the stack, ~12 s here): where PYTHONDONTWRITEBYTECODE is set (this machine class) nothing is ever
  # cached, and every process would compile torch, gradio and diffusers again (their import 20 s instead of 8).
  # Compiling every installed file instead (uv's --compile-bytecode) took 38 s: most of transformers and plotly
  # is never imported. scripts/test.sh writes the bytecode of the rest as the tests import it.
  other="workbench.cli.main, workbench.train, diffusers"
  [ "$dev" = 1 ] && other="$other, pytest, xdist, playwright.sync_api, nbmake, nbclient, ipykernel.kernelapp"
  env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -c "import $other" >/dev/null & half=$!
  env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -c "import app, workbench.ui.layout, workbench.ui.workbench" >/dev/null
  wait "$half"
  touch "$stamp"
fi
if [ "$dev" = 1 ] && [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing Debian chromium for the browser tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "setup: /usr/bin/chromium not found and not root: the browser tests will be skipped"
  fi
fi
echo "setup: .venv ready"
