"""Training entry points: ``factloom train NAME [ARGS…]`` runs ``factloom.model.train.NAME.main(ARGS)``.

Each module here trains one model from the real store or a benchmark data directory, shows progress
bars, registers the result as a :class:`~factloom.ledger.tables.ModelVersion` and returns a process
exit status. Add a model by adding a module with ``main(argv: list[str]) -> int``.
"""

from __future__ import annotations

import importlib
import pkgutil

__all__ = ["targets", "run"]


def targets() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def run(name: str, argv: list[str]) -> int:
    if name not in targets():
        raise SystemExit(f"nothing to train called {name!r}; known: {', '.join(targets()) or 'none yet'}")
    module = importlib.import_module(f"{__name__}.{name}")
    return int(module.main(argv) or 0)
