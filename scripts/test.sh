#!/usr/bin/env bash
# Run the whole test suite (unit, CLI, notebooks, app and browser tests) in .venv; with --fast only the fast tier
# (`make check`): ruff and the tests of the maths and the library, without the integration, browser and slow tests
# (tests/conftest.py INTEGRATION_FILES).
set -euo pipefail
cd "$(dirname "$0")/.."
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p test-artifacts
# Bytecode is written as modules are first imported: where PYTHONDONTWRITEBYTECODE is set (this machine class) every
# test process would otherwise compile what scripts/setup.sh did not (peft, accelerate, torch.distributed, the
# diffusers pipelines: ~700 modules in a `workbench bench load`). __pycache__ is ignored by git.
unset PYTHONDONTWRITEBYTECODE
.venv/bin/ruff check .
# One worker per core, at most 4 (each holds torch and gradio, ~0.6 GB); a test file stays on one worker, so
# its module fixtures (an app server, a trained model) are built once. TEST_WORKERS=0 runs in one process.
workers=${TEST_WORKERS:-$(.venv/bin/python -c "import os; print(min(len(os.sched_getaffinity(0)), 4))")}
parallel=(); [ "$workers" -gt 1 ] && parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
# --durations: the slowest tests in every log, CI's too (three fresh-clone runs took 504-544 s instead of ~285 with
# every test passing; the durations named a notebook whose reply wait missed its wake-up: tests/notebook_waits.py).
# A browser test that fails leaves a full-page screenshot of its page in test-artifacts/failures/ (tests/conftest.py).
if [ "${1:-}" = "--fast" ]; then
    shift
    exec .venv/bin/python -m pytest -q -ra --durations=5 "${parallel[@]}" -m "not slow and not browser and not integration" \
        tests "$@"
fi
exec .venv/bin/python -m pytest -q -ra --durations=15 "${parallel[@]}" tests notebooks --nbmake "$@"
