# The README's commands. Each sets up .venv itself (scripts/setup.sh) on a fresh machine.
#   make run     the app
#   make check   the fast tier: ruff and the tests of the maths and the library (under two minutes on 2 cores)
#   make test    everything: unit, CLI, app, browser, notebooks, wheel and torchrun tests (CI runs this)
# And for mutation testing (docs/mutation.md), not part of CI:
#   make mutation       mutmut over flow/, rl/, train/ and rewards/, continuing from the verdicts in mutation/
#   make mutation-save  pack mutmut's verdicts into mutation/cache.tar.gz (after a run that was stopped)
.PHONY: run check test mutation mutation-save

run:
	bash scripts/setup.sh
	.venv/bin/python app.py

check:
	bash scripts/setup.sh --dev
	bash scripts/test.sh --fast

test:
	bash scripts/setup.sh --dev
	bash scripts/test.sh

# mutmut keeps its verdicts in mutants/ (git ignores it) and reruns only the mutants of functions that changed since.
# The whole run takes longer than one sitting on a small machine, so mutation/cache.tar.gz carries the verdicts (one
# .meta per module) from one clone to the next. mutmut learns again which tests call which function at the start of
# each sitting (a few minutes), so a test changed since counts. A stopped run loses nothing: each verdict is written
# as it comes; `make mutation-save` packs them.
mutation:
	bash scripts/setup.sh --dev
	test -d mutants || test ! -f mutation/cache.tar.gz || { mkdir mutants && tar -xzf mutation/cache.tar.gz -C mutants; }
	rm -f mutants/None mutants/mutmut-stats.json
	-.venv/bin/mutmut run --max-children $$(nproc)
	$(MAKE) mutation-save

mutation-save:
	cd mutants && find workbench -name '*.meta' | sort | tar --create --owner=0 --group=0 --mtime=@0 \
	    --files-from=- | gzip -n > ../mutation/cache.tar.gz
	.venv/bin/mutmut export-cicd-stats && cat mutants/mutmut-cicd-stats.json
