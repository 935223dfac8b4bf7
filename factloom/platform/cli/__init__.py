"""The ``factloom`` command (``pyproject.toml``'s entry point is :func:`main`).

- :mod:`.main`: the parser, every subcommand and its handler, and :func:`main`;
- :mod:`.local`: ``up``, ``down``, ``status``, ``api``, ``migrate``, ``backup``, ``restore``;
- :mod:`.accounts`: ``keys`` and ``users``;
- :mod:`.models`: ``models`` and ``learn``;
- :mod:`.api_calls`: ``ingest``, ``review``, ``query``, ``feedback``, through the HTTP API;
- :mod:`.jobs`: ``bench``, ``train``, ``eval``.

Each handler imports what it needs when it runs: ``factloom --help`` loads neither the ledger nor
the Neo4j driver.
"""

from __future__ import annotations

from factloom.platform.cli.main import build_parser, main

__all__ = ["main", "build_parser"]
