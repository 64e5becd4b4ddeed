# Development entry points. `make run` and `make test` each set everything up first.
PYTHON ?= python3

.PHONY: setup run test

setup:
	$(PYTHON) scripts/setup.py

run: setup
	$(PYTHON) -m zlf run

# Each distribution tests alone: core's tests with core alone installed, then every extension's
# tests and core's tests of real extensions (marked `extensions`) with everything installed, in one
# session so that the workers share the load.
# `-n auto`: one pytest worker per core and one more (pytest-xdist, installed by setup.py --tests;
# tests/conftest.py says why); `--dist worksteal`: a worker that runs out of tests takes some of
# another's (a long test last no longer keeps one core busy while the other waits).
test:
	$(PYTHON) scripts/setup.py --tests --core
	$(PYTHON) -m pytest -q -n auto --dist worksteal tests
	$(PYTHON) scripts/setup.py --tests
	$(PYTHON) -m pytest -q -n auto --dist worksteal extensions tests --only-marked-extensions
