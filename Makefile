# FactLoom developer entry points. `make up` brings the local platform up (no Docker);
# `make test` runs the whole test suite, which starts the services it needs on test ports.
.PHONY: setup up down status test lint

VENV ?= .venv
PY := $(VENV)/bin/python

setup:
	bash scripts/setup.sh

up:
	bash scripts/setup.sh && $(VENV)/bin/factloom up

down:
	$(VENV)/bin/factloom down

status:
	$(VENV)/bin/factloom status

test:
	bash scripts/setup.sh && $(MAKE) --no-print-directory lint && $(PY) -m pytest -q

lint:
	$(PY) -m ruff check factloom tests bench migrations
	$(PY) -m mypy factloom
