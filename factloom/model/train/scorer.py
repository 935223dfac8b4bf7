"""``factloom train scorer --kb KB``: see :mod:`factloom.model.train._verification`."""

from __future__ import annotations

from factloom.model.train._verification import scorer_main

__all__ = ["main"]


def main(argv: list[str]) -> int:
    return scorer_main(argv)
