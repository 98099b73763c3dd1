#!/usr/bin/env bash
# Create .venv at the repository root and install the workbench into it (editable).
#   scripts/setup.sh        the app and library
#   scripts/setup.sh --dev  plus the test tools, and Debian's chromium for the browser tests (when root)
# torch is installed first at a pinned version: on a machine without CUDA set
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu to get the small CPU build.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0; [ "${1:-}" = "--dev" ] && dev=1
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "setup: installing torch"
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    .venv/bin/pip install -q "torch==2.13.0" --index-url "$TORCH_INDEX_URL"
  else
    .venv/bin/pip install -q "torch==2.13.0"
  fi
fi
# The rest with uv when it can be had (parallel downloads: about 1 minute here instead of 4 with pip); pip
# otherwise. torch is already there at the pinned version, which satisfies the project, so uv keeps it.
# --compile-bytecode as pip does: where PYTHONDONTWRITEBYTECODE is set (this machine class) nothing is ever
# cached, and every process would compile gradio, transformers and diffusers again (import 11 s instead of 7).
install() {
  [ -x .venv/bin/uv ] || .venv/bin/pip install -q uv >/dev/null 2>&1 || true
  if [ -x .venv/bin/uv ] && .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python "$@"; then
    return
  fi
  .venv/bin/pip install -q "$@"
}
stamp=.venv/.installed-$dev
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing the workbench into .venv"
  if [ "$dev" = 1 ]; then install -e ".[dev]"; else install -e .; fi
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
