"""The API against its own OpenAPI document, and hostile names through it.

Schemathesis reads the document the live API serves and sends every ``/v1`` operation valid and
invalid requests (its examples, coverage and fuzzing phases) with an admin key, running every check
it has: no 5xx, each status and content type documented, each response matching its schema, valid
data accepted and invalid data refused, 401 without a key, 405 with ``Allow``.

It works in a kb of its own (:data:`KB`): a kb name it draws is replaced by that one, and path
parameters that name things of other kbs or of the platform (review items, model versions, keys)
are pointed at nothing, so it never decides, activates or revokes anything it did not make.

Hypothesis then sends names hostile to Cypher, HTML and terminals; each is refused with a 422 that
says why, or stored and read back as sent (surrounding whitespace removed, as the schema says).
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from schemathesis import Case, HookContext
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events, from_schema
from schemathesis.hooks import GLOBAL_HOOK_DISPATCHER
from schemathesis.specs.openapi.schemas import OpenApiSchema

from factloom.config import Settings
from factloom.graph import Neo4jStore
from factloom.graph.store import KB_PATTERN
from factloom.graph.types import FactWrite
from factloom.ledger import Database, FactSubmission

pytestmark = pytest.mark.integration

KB = "conformance"
EXAMPLES = 15  # per operation in the fuzzing phase; the examples and coverage phases add their own
NOTHING = "conformance-names-nothing"
# path parameters that name something outside the kb under test: never drawn, always nothing
POINTED_AT_NOTHING = ("version", "key_id")
# what the schema cannot say, so a request it allows may still be refused: an image whose bytes do
# not match its content_type (400), a batch or image over a configured limit (413)
ACCEPTED = ["2xx", "401", "403", "404", "409", "429", "400", "413"]


def _served_schema(settings: Settings, token: str) -> OpenApiSchema:
    config = SchemathesisConfig.from_dict({
        "seed": 20261207,
        "base-url": settings.base_url,
        "headers": {"Authorization": token},
        "generation": {"max-examples": EXAMPLES, "mode": "all", "database": "none"},
        "phases": {"stateful": {"enabled": False}},
        "checks": {"enabled": True, "positive_data_acceptance": {"expected-statuses": ACCEPTED}},
    })
    schema = schemathesis.openapi.from_url(f"{settings.base_url}/openapi.json", config=config)
    return schema.include(path_regex="^/v1/")


def _pin(case: Case, db: Database) -> None:
    """Keep the case inside :data:`KB`: a valid kb name becomes KB (an invalid one stays, to be refused)."""
    if isinstance(case.body, dict) and _is_kb(case.body.get("kb")):
        case.body["kb"] = KB
    if case.query is not None and (_is_kb(case.query.get("kb")) or "kb" not in case.query and _declares("kb", case)):
        case.query["kb"] = KB
    for name in POINTED_AT_NOTHING:
        if case.path_parameters and name in case.path_parameters:
            case.path_parameters[name] = NOTHING
    if case.method.upper() == "POST" and case.path == "/v1/review/{submission_id}" and case.path_parameters:
        with db.session() as session:
            row = session.get(FactSubmission, str(case.path_parameters.get("submission_id")))
            if row is not None and row.kb != KB:
                case.path_parameters["submission_id"] = NOTHING


def _is_kb(value: object) -> bool:
    return isinstance(value, str) and KB_PATTERN.match(value) is not None


def _declares(name: str, case: Case) -> bool:
    return any(p.name == name and p.location.value == "query" for p in case.operation.iter_parameters())


def test_every_v1_operation_conforms_to_the_served_document(api: httpx.Client, settings: Settings,
                                                            db: Database) -> None:
    schema = _served_schema(settings, api.headers["authorization"])

    def before_call(context: HookContext, case: Case, kwargs: dict[str, Any]) -> None:
        _pin(case, db)

    schemathesis.hook(before_call)  # a global hook (schemathesis has no per-schema before_call)
    failures: list[str] = []
    operations: set[str] = set()
    try:
        for event in from_schema(schema).execute():
            if isinstance(event, events.ScenarioFinished):
                operations.add(event.recorder.label)
                for checks in event.recorder.checks.values():
                    failures.extend(
                        f"{event.recorder.label}: {c.failure_info.failure.title}\n{c.failure_info.failure.message}\n"
                        f"{c.failure_info.code_sample}" for c in checks if c.failure_info is not None
                    )
            elif isinstance(event, events.NonFatalError | events.FatalError):
                failures.append(f"error: {event}")
            elif isinstance(event, events.EngineFinished):
                failures.extend(f"after run: {f.title}: {f.message}" for f in event.failures)
    finally:
        GLOBAL_HOOK_DISPATCHER.unregister(before_call)
    unique = sorted(set(failures))
    assert not unique, f"{len(unique)} distinct failures:\n\n" + "\n\n".join(unique)
    assert {"POST /v1/facts", "POST /v1/query", "GET /v1/review"} <= operations, operations


# --- hostile names ---

HOSTILE = [
    "Robert'); DROP TABLE facts;--", 'say "hi"', "`backticks`", "} RETURN n //", "{{ 7*7 }}",
    "<script>alert(1)</script>", "a\u202eb\u202dc", "\u200f\u05e9\u05dc\u05d5\u05dd", "emoji \U0001f600\U0001f9e0",
    "\\n not a newline", "x" * 1000, "tab\tinside", "line\nbreak", "$(rm -rf /)", "MATCH (n) DETACH DELETE n",
]
names = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=40),
    st.text(alphabet=string.printable + "\x00\x1b\x7f\u2028", min_size=1, max_size=20),
)


@pytest.fixture(scope="module")
def submitted(api: httpx.Client, db: Database) -> Iterator[Callable[[dict[str, Any]], dict[str, Any] | None]]:
    """POST one fact to :data:`KB`; its submission as ``GET /v1/facts/{id}`` reads it, or None when refused."""

    def submit(fact: dict[str, Any]) -> dict[str, Any] | None:
        response = api.post("/v1/facts", json={"kb": KB, "facts": [fact]})
        if response.status_code == 422:
            problem = response.json()
            assert response.headers["content-type"] == "application/problem+json"
            assert "facts.0." in problem["detail"], problem  # says which field, and why
            return None
        assert response.status_code == 202, response.text
        with db.session() as session:
            ids = [r.id for r in session.query(FactSubmission).filter_by(batch_id=response.json()["batch_id"])]
        if not ids:  # the same fact twice: a duplicate, not stored again
            assert response.json()["duplicates"] == 1
            return {}
        read = api.get(f"/v1/facts/{ids[0]}")
        assert read.status_code == 200, read.text
        return read.json()  # type: ignore[no-any-return]

    yield submit


def _refusal_is_explained(name: str) -> bool:
    """Whether the platform's rule (factloom.platform.types.Printable) refuses this name."""
    return not name.strip() or any(c < " " and c not in "\t\n" for c in name)


@given(subject=names, obj=names, source=names)
@hypothesis.settings(max_examples=15, deadline=None, database=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_hostile_names_are_refused_or_stored_as_sent(
    submitted: Callable[[dict[str, Any]], dict[str, Any] | None], subject: str, obj: str, source: str,
) -> None:
    fact = {"subject": subject, "predicate": "related_to", "object": obj, "source": source}
    stored = submitted(fact)
    refused = any(_refusal_is_explained(n) for n in (subject, obj, source))
    assert (stored is None) == refused, (fact, stored)
    if stored:
        assert (stored["subject"], stored["object"], stored["source"]) == (subject.strip(), obj.strip(), source.strip())
        assert stored["subject"].encode() == subject.strip().encode()


@given(subject=st.sampled_from(HOSTILE), obj=st.sampled_from(HOSTILE))
@hypothesis.settings(max_examples=10, deadline=None, database=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_hostile_names_reach_neo4j_as_parameters(store: Neo4jStore, subject: str, obj: str) -> None:
    fact_id = f"hostile-{abs(hash((subject, obj)))}"
    store.write_facts(KB, [FactWrite(fact_id=fact_id, subject=subject, predicate="related_to", object=obj,
                                     source="<b>src</b>")])
    [read] = store.facts_by_id(KB, [fact_id])
    assert (read.subject, read.predicate, read.object, read.sources) == (subject, "related_to", obj, ["<b>src</b>"])
