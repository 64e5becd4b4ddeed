# Development entry points. `make run` and `make test` each set everything up first.
PYTHON ?= python3

.PHONY: setup run test

setup:
	$(PYTHON) scripts/setup.py

run: setup
	$(PYTHON) -m zlf run

test:
	$(PYTHON) scripts/setup.py --tests
	$(PYTHON) -m pytest -q
