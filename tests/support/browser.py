"""The admin UI in Debian's chromium (Playwright): importing this skips a test module where chromium
or Playwright is missing. Screenshots land in ``test-output/``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from factloom.config import Settings
from factloom.ledger import Database, FactSubmission, Status

CHROMIUM = "/usr/bin/chromium"
OUT = Path(__file__).resolve().parents[2] / "test-output"

sync_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():  # scripts/setup.sh installs it; say so rather than fail obscurely
    pytest.skip(f"{CHROMIUM} is missing: run scripts/setup.sh (apt-get install chromium)", allow_module_level=True)


@contextmanager
def chromium() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def sign_in(browser: Any, settings: Settings, name: str, password: str, path: str = "/admin/queue") -> Any:
    page = browser.new_page(viewport={"width": 1440, "height": 1000}, base_url=settings.base_url)
    page.set_default_timeout(20_000)
    page.goto(path)
    assert "/admin/login" in page.url  # signed out: sent to the sign-in page, then back
    page.fill("#name", name)
    page.fill("#password", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"**{path}*")
    return page


def status_of(db: Database, sid: str) -> Status:
    with db.session() as session:
        row = session.get(FactSubmission, sid)
        assert row is not None
        return row.status


def poll(what: str, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)
