# Development entry points. `make run` and `make test` each set everything up first.
PYTHON ?= python3
EXTENSIONS := $(sort $(dir $(wildcard extensions/*/pyproject.toml)))

.PHONY: setup run test

setup:
	$(PYTHON) scripts/setup.py

run: setup
	zlf run

test: setup
	$(PYTHON) -m pytest -q
