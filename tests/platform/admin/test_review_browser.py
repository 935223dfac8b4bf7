"""The reviewer's day in Debian's chromium (Playwright), against the live platform.

Sign-out ends the session for a copied cookie too, and every answer carries the security headers;
the queue says why each claim waits, groups rival values and decides them together; decisions say
what they do and can be undone, or reopened by an admin, with the graph put back as it was; names
with right-to-left overrides are shown, not obeyed; the Batches page narrows to a kb and draws its
axes; the Models page says what serves a kb with no learned model. Screenshots land in ``test-output/``.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.ledger import Database, Status
from factloom.platform.admin.users import create_user
from tests.support.api import facts, submission_ids, wait_batch, wait_status
from tests.support.browser import OUT, poll, sign_in, status_of

pytestmark = pytest.mark.integration

KB = "adminui-day"
EVIL = "Ev\u202eil Twin"  # a right-to-left override: shown raw it would read "Evlin Twi" backwards
BASE = [("Heat", "release_year", "1995"), ("Heat", "directed_by", "Michael Mann"),
        ("Ronin", "release_year", "1998"), ("Thief", "release_year", "1981")]
RIVALS = [("Heat", "release_year", "1986"), ("Heat", "release_year", "1999"), ("Ronin", "release_year", "2001"),
          (EVIL, "similar_to", EVIL)]


@pytest.fixture(scope="module")
def day(api: httpx.Client, db: Database) -> dict[str, str]:
    """The kb, the day's accounts, and four claims the checker sends to review: their ids by name."""
    wait_batch(api, api.post("/v1/facts", json={"kb": KB, "facts": facts(BASE)}).json()["batch_id"])
    batch = api.post("/v1/facts", json={"kb": KB, "facts": facts(RIVALS, "forum")}).json()["batch_id"]
    ids = dict(zip(("heat86", "heat99", "ronin", "evil"), submission_ids(db, batch), strict=True))
    for sid in ids.values():
        wait_status(api, sid, "needs_review")
    create_user(db=db, name="day-reviewer", role="reviewer", password="day-reviewer-pw")
    create_user(db=db, name="day-admin", role="admin", password="day-admin-pw")
    OUT.mkdir(exist_ok=True)
    return ids


def current(store: Neo4jStore, subject: str) -> list[str]:
    return [f.object for f in store.current_facts(KB, [(subject, "release_year")])[(subject, "release_year")]]


def test_sign_out_ends_the_session_for_a_copied_cookie_and_headers_hold(
    browser: Any, settings: Settings, day: dict[str, str], db: Database,
) -> None:
    page = sign_in(browser, settings, "day-reviewer", "day-reviewer-pw", f"/admin/queue?kb={KB}")
    answer = page.goto(f"/admin/queue?kb={KB}")
    assert answer is not None
    static = [page.request.get(f"/admin/{path}") for path in ("static/admin.css", "vendor/cytoscape.min.js")]
    for response in (answer, *static):
        assert response.headers["referrer-policy"] == "same-origin", response.url
        assert response.headers["x-content-type-options"] == "nosniff", response.url
    copied = page.context.cookies()
    page.click("text=Sign out")
    page.wait_for_url("**/admin/login*")
    thief = browser.new_context(base_url=settings.base_url)
    thief.add_cookies(copied)  # the cookie as it was before signing out: signed, unexpired, revoked
    replay = thief.new_page()
    replay.goto(f"/admin/queue?kb={KB}")
    assert "/admin/login" in replay.url
    refused = replay.request.post("/admin/queue/bulk", form={"decision": "reject", "ids": day["ronin"]})
    assert refused.status == 401 and status_of(db, day["ronin"]) is Status.needs_review
    thief.close()
    page.close()


def test_the_queue_says_why_groups_rival_values_and_shows_bidi_names(
    browser: Any, settings: Settings, day: dict[str, str], db: Database,
) -> None:
    page = sign_in(browser, settings, "day-reviewer", "day-reviewer-pw", f"/admin/queue?kb={KB}")
    rows = page.locator("table.queue tbody tr")
    assert rows.count() == 4 and page.locator("#position").inner_text() == "1–4 of 4"
    why = {rows.nth(i).get_attribute("data-id"): rows.nth(i).locator("a.why").inner_text() for i in range(4)}
    assert why[day["heat86"]] == "value clash" and why[day["evil"]] == "self-loop"
    evil_row = page.locator(f"tr[data-id='{day['evil']}']").inner_text()
    assert "Ev[U+202E]il Twin" in evil_row and "\u202e" not in evil_row  # shown, not obeyed
    page.screenshot(path=str(OUT / "admin-queue.png"), full_page=True)

    page.fill("#f-q", "HEAT")
    page.click("#filters button[type=submit]")
    assert page.locator("table.queue tbody tr").count() == 2

    page.goto(f"/admin/queue?kb={KB}&group=reason")
    groups = page.locator("#reason-groups tbody tr")
    assert {groups.nth(i).get_attribute("data-reason") for i in range(groups.count())} == {"value_clash", "self_loop"}

    page.goto(f"/admin/queue?kb={KB}&group=claim")
    heat = page.locator("#claim-groups tr[data-subject='Heat']")
    assert "Heat" in heat.inner_text() and heat.locator("button[name=keep]").count() == 2
    page.screenshot(path=str(OUT / "admin-queue-groups.png"), full_page=True)
    heat.locator("button:has-text('Keep 1999')").click()
    notice = page.locator(".flash").inner_text()
    assert "Kept" in notice and "rejected 1 rival value" in notice
    assert status_of(db, day["heat86"]) is Status.rejected and status_of(db, day["heat99"]) is not Status.needs_review
    # undo the group's decision from the notice: both wait again
    page.keyboard.press("u")
    poll("the group undone", lambda: status_of(db, day["heat86"]) is Status.needs_review
         and status_of(db, day["heat99"]) is Status.needs_review)
    page.close()


def test_a_decision_says_what_it_does_and_undo_and_reopen_put_the_graph_back(
    browser: Any, settings: Settings, day: dict[str, str], db: Database, store: Neo4jStore,
) -> None:
    page = sign_in(browser, settings, "day-reviewer", "day-reviewer-pw", f"/admin/review/{day['ronin']}?kb={KB}")
    accept = page.locator("button[value=accept]").inner_text()
    assert accept.startswith("Replace 1998 with 2001")
    assert page.locator("button[value=keep_both]").inner_text().startswith("Both hold: keep 1998 and 2001")
    assert page.locator("button[value=reject]").inner_text().startswith("Reject 2001")
    page.screenshot(path=str(OUT / "admin-item.png"), full_page=True)
    page.keyboard.press("a")
    page.wait_for_selector(".flash form.undo")
    assert "Undo" in page.locator(".flash").inner_text()
    assert poll("2001 replaces 1998 in Neo4j", lambda: current(store, "Ronin") == ["2001"])
    page.screenshot(path=str(OUT / "admin-undo.png"))
    page.click(".flash form.undo button")
    assert "is back in the queue" in page.locator(".flash").inner_text()
    assert status_of(db, day["ronin"]) is Status.needs_review
    assert poll("1998 holds again", lambda: current(store, "Ronin") == ["1998"])

    # decided again, then reopened by an admin long after the notice is gone
    page.goto(f"/admin/review/{day['ronin']}?kb={KB}")
    page.keyboard.press("a")
    assert poll("committed again", lambda: status_of(db, day["ronin"]) is Status.committed)
    page.goto(f"/admin/review/{day['ronin']}")
    assert page.locator("#reopen-form").count() == 0  # a reviewer may not reopen
    page.close()
    admin = sign_in(browser, settings, "day-admin", "day-admin-pw", f"/admin/review/{day['ronin']}")
    admin.fill("#reopen-reason", "the 2001 date is the DVD release")
    admin.click("#reopen-form button")
    assert "Reopened: it was committed" in admin.locator(".flash").inner_text()
    assert status_of(db, day["ronin"]) is Status.needs_review and current(store, "Ronin") == ["1998"]
    assert "review.reopen" in admin.locator("#history").inner_text()
    admin.close()


def test_batches_narrow_to_the_kb_with_axes_and_models_name_the_baseline(
    browser: Any, settings: Settings, day: dict[str, str], db: Database,
) -> None:
    reviewer = sign_in(browser, settings, "day-reviewer", "day-reviewer-pw", f"/admin/review/{day['evil']}")
    reviewer.keyboard.press("r")  # a decision that stays, for the reviewers' table
    poll("rejected", lambda: status_of(db, day["evil"]) is Status.rejected)
    reviewer.close()
    page = sign_in(browser, settings, "day-admin", "day-admin-pw", f"/admin/batches?kb={KB}")
    cards = page.locator(".stats").inner_text().lower()  # the labels are set in capitals
    assert "waiting for review" in cards and "oldest waiting" in cards
    assert set(page.locator("#batches tbody td:nth-child(2)").all_inner_texts()) == {KB}
    chart = page.locator("#minute-chart svg")
    assert chart.locator("text:has-text('facts / min')").count() == 1
    assert chart.locator("text:has-text('now')").count() == 1
    assert "day-reviewer" in page.locator("#reviewers").inner_text()
    page.screenshot(path=str(OUT / "admin-batches.png"), full_page=True)
    page.goto(f"/admin/models?kb={KB}")
    serving = page.locator("#serving-now").inner_text()
    assert serving.count("baseline") >= 4 and "pathrank-baseline" in serving and "k-hop expansion" in serving
    page.close()
