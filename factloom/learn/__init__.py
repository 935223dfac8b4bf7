"""The jobs that train, update, evaluate and register models: the application layer above ``model/``.

``factloom train NAME [ARGS…]`` runs one of :data:`TARGETS` (each parses its own arguments, shows
progress bars, registers the result as a :class:`~factloom.ledger.tables.ModelVersion` and returns a
process exit status); the ``learn`` Celery task runs :mod:`factloom.learn.continual`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

__all__ = ["TARGETS", "UPDATES", "targets", "run"]

# what a continual update learns: ``scorer`` from new committed facts, ``reasoner`` (with a kb's
# first router) from new answer feedback
UPDATES = ("scorer", "reasoner")

# ``factloom train NAME`` → (module, function taking argv)
TARGETS: dict[str, tuple[str, str]] = {
    "scorer": ("factloom.learn.verification", "scorer_main"),
    "fusion": ("factloom.learn.verification", "fusion_main"),
    "router": ("factloom.learn.qa", "router_main"),
    "reasoner": ("factloom.learn.qa", "reasoner_main"),
}


def targets() -> list[str]:
    return sorted(TARGETS)


def run(name: str, argv: list[str]) -> int:
    if name not in TARGETS:
        raise SystemExit(f"nothing to train called {name!r}; known: {', '.join(targets())}")
    module, function = TARGETS[name]
    main: Callable[[list[str]], int] = getattr(importlib.import_module(module), function)
    return int(main(argv) or 0)
