# The README's commands. Each sets up .venv itself (scripts/setup.sh) on a fresh machine.
#   make run     the app
#   make check   the fast tier: ruff and the tests of the maths and the library (under two minutes on 2 cores)
#   make test    everything: unit, CLI, app, browser, notebooks, wheel and torchrun tests (CI runs this)
.PHONY: run check test

run:
	bash scripts/setup.sh
	.venv/bin/python app.py

check:
	bash scripts/setup.sh --dev
	bash scripts/test.sh --fast

test:
	bash scripts/setup.sh --dev
	bash scripts/test.sh
