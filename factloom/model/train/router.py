"""``factloom train router --dataset pathquestion|metaqa|jsonl [--data-dir DIR] [--set NAME] [--kb KB]``."""

from __future__ import annotations

from factloom.model.train._common import train_main

__all__ = ["main"]


def main(argv: list[str]) -> int:
    return train_main(["router"], argv)
