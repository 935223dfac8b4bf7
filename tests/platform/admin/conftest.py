"""The admin UI's browser tests share one way to start chromium: a fresh one per test module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from tests.support.browser import chromium  # skips where chromium or Playwright is missing

    with chromium() as started:
        yield started
