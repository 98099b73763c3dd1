#!/usr/bin/env bash
# Run the whole test suite (unit, CLI, notebooks, app and browser tests) in .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p test-artifacts
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q -ra tests notebooks --nbmake "$@"
