# The two commands of the README. Both set up .venv themselves (scripts/setup.sh) on a fresh machine.
.PHONY: run test

run:
	bash scripts/setup.sh
	.venv/bin/python app.py

test:
	bash scripts/setup.sh --dev
	bash scripts/test.sh
