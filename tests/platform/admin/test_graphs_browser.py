"""The admin UI's graphs in Debian's chromium (Playwright), against the live platform.

The Ask page writes each path as walked from the linked entity, a step against a fact's direction
as such; a busy entity's neighbourhood is summarised per relation ("+35 more") and expands on a
click; labels are legible at the first zoom; on a review item no edge runs through a node. The
geometry is read from Cytoscape itself. Screenshots land in ``test-output/``.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from factloom.config import Settings
from factloom.ledger import Database
from factloom.platform.admin.users import create_user
from tests.support.api import ask, facts, submission_ids, wait_batch, wait_status
from tests.support.browser import OUT, poll, sign_in

pytestmark = pytest.mark.integration

KB = "adminui-graphs"
BUSY = 60  # films of one director: far more than a neighbourhood draws
HOSTILE = "<img src=x onerror=alert(1)>\u202e" + "Osaka " * 80  # markup, a right-to-left override, 500+ characters
BASE = [
    ("Blade Runner", "directed_by", "Ridley Scott"), ("Blade Runner", "has_genre", "Science Fiction"),
    ("Black Rain", "directed_by", "Ridley Scott"), ("Black Rain", "has_genre", "Action"),
    ("Black Rain", "release_year", "1989"), ("Black Rain", "starred_actors", "Michael Douglas"),
    ("Black Rain", "filmed_in", HOSTILE),
    ("Body of Lies", "directed_by", "Ridley Scott"), ("Body of Lies", "has_genre", "Thriller"),
    ("Total Recall", "release_year", "1990"), ("Goodfellas", "release_year", "1990"),
    *[(f"Busy Film {i:02d}", "directed_by", "Busy Director") for i in range(1, BUSY + 1)],
]
NAME = "graphs-reviewer"
PASSWORD = "graphs-password"
MIN_FONT_PX = 11.0  # rendered size of the smallest node label at the first zoom



@pytest.fixture(scope="module")
def claim(api: httpx.Client, db: Database) -> str:
    """The knowledge base, a reviewer, and one claim that contradicts it (sent to review): its id."""
    wait_batch(api, api.post("/v1/facts", json={"kb": KB, "facts": facts(BASE)}).json()["batch_id"])
    batch = api.post("/v1/facts", json={"kb": KB, "facts": facts([("Black Rain", "release_year", "1990")],
                                                                  "blog")}).json()["batch_id"]
    (sid,) = submission_ids(db, batch)
    wait_status(api, sid, "needs_review")
    create_user(db=db, name=NAME, role="reviewer", password=PASSWORD)
    OUT.mkdir(exist_ok=True)
    return sid


def cy(page: Any, canvas: str, script: str) -> Any:
    """``script``, the body of a function of ``cy`` (the canvas's Cytoscape instance), run in the page."""
    return page.evaluate(f"() => {{ const cy = document.getElementById('{canvas}')._cy; {script} }}")


def smallest_label_px(page: Any, canvas: str) -> float:
    return float(cy(page, canvas, "return Math.min(...cy.nodes().map(n => parseFloat(n.style('font-size')))) "
                                  "* cy.zoom();"))


def test_ask_paths_name_every_entity_they_pass(
    browser: Any, settings: Settings, claim: str, api: httpx.Client,
) -> None:
    question = "what genres are the films directed by the director of [Blade Runner]"
    by_api = {a["name"]: a for a in ask(api, KB, question)}
    assert "Action" in by_api, by_api
    assert any(s["subject"] == "Black Rain" for p in by_api["Action"]["paths"] for s in p)

    page = sign_in(browser, settings, NAME, PASSWORD, f"/admin/ask?kb={KB}&question=" + question.replace(" ", "+"))
    action = page.locator("#answers li:has(.name:text-is('Action'))")
    lines = [" ".join(t.split()) for t in action.locator(".path").all_text_contents()]
    assert lines, page.locator("#answers").inner_text()
    # walked from Blade Runner: up to its director, back down to another of his films, on to its genre
    assert "Blade Runner –directed_by→ Ridley Scott ←directed_by– Black Rain –has_genre→ Action" in lines, lines
    assert len(set(lines)) == len(lines)
    every = [" ".join(t.split()) for t in page.locator("#answers .path").all_text_contents()]
    assert len(set(every)) == len(every), every  # no two lines alike
    assert page.locator("#answers .step.reverse").first.text_content() == "←directed_by–"

    page.wait_for_selector("#ask-graph canvas")
    assert smallest_label_px(page, "ask-graph") >= MIN_FONT_PX
    # a click on the path highlights its three facts, each drawn from its subject to its object
    action.locator(".path", has_text="Black Rain").first.click()
    highlighted = cy(page, "ask-graph", "return cy.edges('.hl').map(e => [e.source().data('label'), "
                                        "e.data('label'), e.target().data('label')]);")
    assert sorted(map(tuple, highlighted)) == [("Black Rain", "directed_by", "Ridley Scott"),
                                              ("Black Rain", "has_genre", "Action"),
                                              ("Blade Runner", "directed_by", "Ridley Scott")]
    page.screenshot(path=str(OUT / "admin-ask.png"), full_page=True)
    page.close()


def test_a_busy_entity_is_summarised_and_expands_on_click(browser: Any, settings: Settings, claim: str) -> None:
    page = sign_in(browser, settings, NAME, PASSWORD, f"/admin/graph?kb={KB}&q=busy+director")
    page.click("a.hit >> text=Busy Director")
    page.wait_for_selector("#entity-graph canvas")
    count = "return [cy.nodes().not('.more').length, cy.nodes('.more').map(n => n.data('label'))];"
    nodes, summaries = cy(page, "entity-graph", count)
    assert nodes == 26 and summaries == [f"+{BUSY - 25} more ←directed_by–"]  # the director and 25 films
    assert smallest_label_px(page, "entity-graph") >= MIN_FONT_PX
    page.screenshot(path=str(OUT / "admin-entity.png"), full_page=True)

    # a click on the summary draws the next page and counts down; after the last page it is gone
    cy(page, "entity-graph", "cy.nodes('.more').emit('tap');")
    second = [51, [f"+{BUSY - 50} more ←directed_by–"]]
    assert poll("the second page", lambda: cy(page, "entity-graph", count) == second, timeout=20)
    cy(page, "entity-graph", "cy.nodes('.more').emit('tap');")
    assert poll("the last page", lambda: cy(page, "entity-graph", count) == [BUSY + 1, []], timeout=20)
    labels = cy(page, "entity-graph", "return cy.nodes().map(n => n.data('label'));")
    assert sorted(labels) == ["Busy Director", *(f"Busy Film {i:02d}" for i in range(1, BUSY + 1))]
    page.close()


def test_review_item_graph_draws_no_edge_through_a_node(browser: Any, settings: Settings, claim: str) -> None:
    page = sign_in(browser, settings, NAME, PASSWORD, f"/admin/review/{claim}")
    page.wait_for_selector("#item-graph canvas")
    labels = cy(page, "item-graph", "return cy.nodes().map(n => n.data('label'));")
    assert {"Black Rain", "1990", "Ridley Scott", "1989", "Total Recall", "Goodfellas"} <= set(labels)
    assert cy(page, "item-graph", "return cy.edges('.claim').map(e => [e.source().data('label'), "
                                  "e.target().data('label')]);") == [["Black Rain", "1990"]]
    # every edge as the segment between its ends' centres; no other node's disc may meet it
    crossings = cy(page, "item-graph", """
        const hits = [];
        cy.edges().forEach(e => {
          const a = e.source().renderedPosition(), b = e.target().renderedPosition();
          const dx = b.x - a.x, dy = b.y - a.y, len2 = dx * dx + dy * dy || 1;
          cy.nodes().forEach(n => {
            if (n.same(e.source()) || n.same(e.target())) return;
            const p = n.renderedPosition();
            const t = Math.max(0, Math.min(1, ((p.x - a.x) * dx + (p.y - a.y) * dy) / len2));
            const d = Math.hypot(a.x + t * dx - p.x, a.y + t * dy - p.y);
            if (d < n.renderedOuterWidth() / 2 + 2) hits.push([e.data('label'), n.data('label')]);
          });
        });
        return hits;""")
    assert crossings == []
    assert smallest_label_px(page, "item-graph") >= MIN_FONT_PX
    # the hostile name is text on the canvas (its override shown as a code point), cut short by an ellipsis
    assert page.locator("img[src=x]").count() == 0
    hostile = cy(page, "item-graph", "const n = cy.nodes().filter(n => n.data('label').includes('Osaka'));"
                                     "const box = n.renderedBoundingBox({includeLabels: true});"
                                     "return [n.data('label'), Math.max(box.w, box.h)];")
    assert hostile[0].startswith("<img src=x onerror=alert(1)>[U+202E]Osaka Osaka") and hostile[1] < 300, hostile
    page.locator("#neighbourhood").screenshot(path=str(OUT / "admin-item-graph.png"))
    page.close()
