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
	bash scripts/setup.sh && $(PY) -m pytest -q

# ruff and mypy when installed; neither is required
lint:
	@if $(PY) -m ruff --version >/dev/null 2>&1; then $(PY) -m ruff check factloom tests; \
	else echo "lint: ruff not installed, skipped"; fi
	@if $(PY) -m mypy --version >/dev/null 2>&1; then $(PY) -m mypy factloom; \
	else echo "lint: mypy not installed, skipped"; fi
