"""``factloom train fusion --kb KB``: see :mod:`factloom.model.train._verification`."""

from __future__ import annotations

from factloom.model.train._verification import fusion_main

__all__ = ["main"]


def main(argv: list[str]) -> int:
    return fusion_main(argv)
