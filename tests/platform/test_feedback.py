"""Answer feedback through the live API, the command line and the admin Ask page, into the real ledger."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from factloom.config import Settings
from factloom.ledger import AnswerFeedback, Database
from factloom.platform.admin.users import create_user
from tests.support.api import admin_sign_in, assert_problem, factloom, facts, wait_batch

pytestmark = pytest.mark.integration

KB = "feedback"
HOSTILE = '"><script>alert(1)</script>'
MOVIES = [
    ("Blade Runner", "directed_by", "Ridley Scott"),
    ("Alien", "directed_by", "Ridley Scott"),
    ("Hostile Film", "directed_by", HOSTILE),
]
QUESTION = "who directed [Blade Runner]"


@pytest.fixture(scope="module")
def kb(api: httpx.Client) -> str:
    wait_batch(api, api.post("/v1/facts", json={"kb": KB, "facts": facts(MOVIES)}).json()["batch_id"])
    return KB


def rows(db: Database, **where: Any) -> list[AnswerFeedback]:
    with db.session() as session:
        return list(session.scalars(select(AnswerFeedback).filter_by(**where).order_by(AnswerFeedback.id)).all())


def count(db: Database) -> int:
    with db.session() as session:
        return session.scalar(select(func.count()).select_from(AnswerFeedback)) or 0


def item(**changes: Any) -> dict[str, Any]:
    return {"question": QUESTION, "answer": "Ridley Scott", "correct": True, **changes}


# ---------------------------------------------------------------- the API


def test_a_batch_is_recorded_whole_with_the_key_as_actor(
    kb: str, client_with: Callable[[str], httpx.Client], db: Database, api: httpx.Client
) -> None:
    asker = client_with("query")
    batch = [
        item(question=f"  {QUESTION}  ", reasoner_version="pathrank-baseline-2"),
        item(question="who directed [Alien]", answer="Peter Weir", correct=False, expected="Ridley Scott"),
        item(question="who directed [Alien]", answer="James Cameron", correct=False),
    ]
    response = asker.post("/v1/feedback", json={"kb": kb, "items": batch})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["count"] == 3 and len(body["ids"]) == 3 and body["ids"] == sorted(body["ids"])
    stored = [r for r in rows(db, kb=kb) if r.id in body["ids"]]
    actor = stored[0].actor
    assert actor.startswith("key:test-query#")  # the key's name and id
    assert [(r.question, r.answer, r.correct, r.expected, r.actor, r.reasoner_version) for r in stored] == [
        (QUESTION, "Ridley Scott", True, None, actor, "pathrank-baseline-2"),
        ("who directed [Alien]", "Peter Weir", False, "Ridley Scott", actor, None),
        ("who directed [Alien]", "James Cameron", False, None, actor, None),
    ]
    assert all(r.created_at is not None for r in stored)

    listed = asker.get("/v1/feedback", params={"kb": kb, "limit": 2})
    assert listed.status_code == 200, listed.text
    newest = listed.json()["items"]
    assert [i["id"] for i in newest] == body["ids"][:0:-1]  # newest first, two of them
    assert newest[0]["actor"] == actor and newest[0]["correct"] is False
    assert_problem(asker.get("/v1/feedback", params={"kb": "no spaces"}), 422, "kb")

    scraped = api.get("/metrics").text
    # the multiprocess exposition sorts the labels; a single process keeps their declared order
    counted = [line for line in scraped.splitlines() if line.startswith("factloom_answer_feedback_total{")
               and 'kb="feedback"' in line and 'correct="false"' in line]
    assert len(counted) == 1 and float(counted[0].split()[-1]) >= 2, scraped


BAD_ITEMS = [
    (item(answer="   "), "items.1.answer", "at least 1 character"),
    (item(question="who\x00directed"), "items.1.question", "NUL"),
    (item(question="x" * 2001), "items.1.question", "at most 2000"),
    (item(expected="Ridley Scott"), "items.1", "leave it out when correct is true"),
    (item(correct="yes"), "items.1.correct", "valid boolean"),
    (item(expected=""), "items.1.expected", "at least 1 character"),
    (item(source="me"), "items.1.source", "Extra inputs"),
    ({"question": QUESTION, "answer": "Ridley Scott"}, "items.1.correct", "Field required"),
]


@pytest.mark.parametrize(("bad", "where", "fragment"), BAD_ITEMS)
def test_one_bad_item_refuses_the_batch_and_writes_nothing(
    kb: str, api: httpx.Client, db: Database, bad: dict[str, Any], where: str, fragment: str
) -> None:
    before = count(db)
    response = api.post("/v1/feedback", json={"kb": kb, "items": [item(), bad, item(correct=False)]})
    assert_problem(response, 422, where)
    assert fragment in response.json()["detail"], response.json()
    assert count(db) == before


def test_expected_beside_a_right_answer_is_refused_clearly(kb: str, api: httpx.Client, db: Database) -> None:
    before = count(db)
    response = api.post("/v1/feedback", json={"kb": kb, "items": [item(expected="Ridley Scott")]})
    assert_problem(response, 422, "'expected' is the right answer to a wrong one: leave it out when correct is true")
    assert count(db) == before


def test_batch_size_kb_and_scope(kb: str, api: httpx.Client, client_with: Callable[[str], httpx.Client],
                                 anonymous: httpx.Client, db: Database) -> None:
    before = count(db)
    assert_problem(api.post("/v1/feedback", json={"kb": kb, "items": []}), 422, "at least 1 item")
    assert_problem(api.post("/v1/feedback", json={"kb": kb, "items": [item()] * 1001}), 422, "at most 1000 items")
    assert_problem(api.post("/v1/feedback", json={"kb": "no-such-kb", "items": [item()]}), 404,
                   "knowledge base 'no-such-kb' holds no entities")
    assert_problem(api.post("/v1/feedback", json={"kb": "", "items": [item()]}), 422, "kb")
    ingest_only = client_with("ingest")
    assert_problem(ingest_only.post("/v1/feedback", json={"kb": kb, "items": [item()]}), 403, "'query' scope")
    assert_problem(ingest_only.get("/v1/feedback"), 403, "'query' scope")
    assert_problem(anonymous.post("/v1/feedback", json={"kb": kb, "items": [item()]}), 401, "missing API key")
    assert count(db) == before
    full = api.post("/v1/feedback", json={"kb": kb, "items": [item()] * 1000})
    assert full.status_code == 201 and full.json()["count"] == 1000
    assert count(db) == before + 1000


# ---------------------------------------------------------------- the command line


def test_feedback_from_the_command_line(kb: str, client_with: Callable[[str], httpx.Client], db: Database) -> None:
    from factloom.platform.auth.service import create_key

    key, principal = create_key(db=db, name="cli-feedback", scopes=["query"])
    right = factloom("feedback", QUESTION, "Ridley Scott", "--right", "--kb", kb, key=key)
    assert right.returncode == 0, right.stderr
    assert "'Ridley Scott' marked right" in right.stdout
    wrong = factloom("feedback", "who directed [Alien]", "Peter Weir", "--wrong", "--expected", "Ridley Scott",
                     "--kb", kb, key=key)
    assert wrong.returncode == 0, wrong.stderr
    assert "marked wrong, the right answer 'Ridley Scott'" in wrong.stdout
    mine = rows(db, actor=principal.actor)
    assert [(r.answer, r.correct, r.expected) for r in mine] == [("Ridley Scott", True, None),
                                                                ("Peter Weir", False, "Ridley Scott")]
    both = factloom("feedback", QUESTION, "Ridley Scott", "--right", "--expected", "x", "--kb", kb, key=key)
    assert both.returncode != 0 and "use it with --wrong" in both.stderr
    neither = factloom("feedback", QUESTION, "Ridley Scott", "--kb", kb, key=key)
    assert neither.returncode != 0 and "one of the arguments --right --wrong is required" in neither.stderr
    misspelt = factloom("feedback", QUESTION, "Ridley Scott", "--right", "--kb", "feedbak", key=key)
    assert misspelt.returncode != 0 and "knowledge base 'feedbak' holds no entities" in misspelt.stderr
    assert len(rows(db, actor=principal.actor)) == 2


# ---------------------------------------------------------------- the admin Ask page


def sign_in(settings: Settings, db: Database, name: str) -> tuple[httpx.Client, str]:
    create_user(db=db, name=name, role="reviewer", password="reviewer-password")
    browser = httpx.Client(base_url=settings.base_url, timeout=60)
    return browser, admin_sign_in(browser, name, "reviewer-password", "/admin/ask")


def test_the_ask_page_marks_answers_right_or_wrong(kb: str, settings: Settings, db: Database) -> None:
    browser, csrf = sign_in(settings, db, "fb-rita")
    page = browser.get("/admin/ask", params={"question": QUESTION, "kb": kb, "hops": "1"})
    assert page.status_code == 200, page.text
    assert 'aria-label="Mark Ridley Scott right"' in page.text and 'aria-label="Mark Ridley Scott wrong"' in page.text
    assert page.text.count('name="verdict" value="right"') >= 1 and '>✓</button>' in page.text
    assert f'name="question" value="{QUESTION}"' in page.text and 'name="expected"' in page.text

    # the page script's post: a JSON answer the row shows in place of its buttons
    done = browser.post("/admin/api/feedback", headers={"X-CSRF-Token": csrf}, data={
        "kb": kb, "question": QUESTION, "answer": "Ridley Scott", "verdict": "wrong", "expected": "Ridley Scot",
        "reasoner_version": "pathrank-baseline-2"})
    assert done.status_code == 201, done.text
    assert done.json() == {"message": "thanks: marked wrong (right answer: Ridley Scot)"}
    # without scripts: the form posts, and the same question comes back with the thank-you line
    back = f"question={QUESTION}&kb={kb}&hops=1&next=https://evil.example"
    form = {"csrf": csrf, "kb": kb, "question": QUESTION, "answer": "Ridley Scott", "verdict": "right",
            "expected": "typed, then ✓", "reasoner_version": "", "back": back}
    posted = browser.post("/admin/ask/feedback", data=form)
    assert posted.status_code == 303
    assert posted.headers["location"] == "/admin/ask?question=who+directed+%5BBlade+Runner%5D&kb=feedback&hops=1"
    again = browser.get(posted.headers["location"])
    assert "thanks: marked right" in again.text and 'aria-label="Mark Ridley Scott right"' in again.text
    assert [(r.answer, r.correct, r.expected, r.reasoner_version) for r in rows(db, actor="user:fb-rita")] == [
        ("Ridley Scott", False, "Ridley Scot", "pathrank-baseline-2"), ("Ridley Scott", True, None, None)]

    before = count(db)
    forged = browser.post("/admin/api/feedback", headers={"X-CSRF-Token": "made-up"},
                          data={"kb": kb, "question": QUESTION, "answer": "x", "verdict": "right"})
    assert forged.status_code == 403 and forged.headers["content-type"] == "application/problem+json"
    assert browser.post("/admin/ask/feedback", data={**form, "csrf": "made-up"}).status_code == 403
    undecided = browser.post("/admin/api/feedback", headers={"X-CSRF-Token": csrf},
                             data={"kb": kb, "question": QUESTION, "answer": "x", "verdict": "maybe"})
    assert undecided.status_code == 400 and "right or wrong" in undecided.json()["detail"]
    nul = browser.post("/admin/api/feedback", headers={"X-CSRF-Token": csrf},
                       data={"kb": kb, "question": QUESTION, "answer": "a\x00b", "verdict": "right"})
    assert nul.status_code == 400 and "NUL" in nul.json()["detail"]
    nowhere = browser.post("/admin/api/feedback", headers={"X-CSRF-Token": csrf},
                           data={"kb": "no-such-kb", "question": QUESTION, "answer": "x", "verdict": "right"})
    assert nowhere.status_code == 404
    assert count(db) == before
    browser.close()


def test_a_hostile_answer_name_stays_text(kb: str, settings: Settings, db: Database) -> None:
    browser, csrf = sign_in(settings, db, "fb-hostile")
    page = browser.get("/admin/ask", params={"question": "who directed [Hostile Film]", "kb": kb, "hops": "1"})
    assert page.status_code == 200, page.text
    assert "<script>alert(1)</script>" not in page.text
    assert 'value="&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in page.text  # the hidden answer field
    done = browser.post("/admin/api/feedback", headers={"X-CSRF-Token": csrf}, data={
        "kb": kb, "question": "who directed [Hostile Film]", "answer": HOSTILE, "verdict": "right"})
    assert done.status_code == 201 and done.headers["content-type"] == "application/json"
    assert [r.answer for r in rows(db, actor="user:fb-hostile")] == [HOSTILE]
    browser.close()
