"""Stored evidence: a fact submitted without evidence text is checked against the evidence texts of
earlier judged-true facts about its entities, read from the real ledger, through the real worker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import update

from factloom.ledger import Database, FactSubmission, Status
from factloom.ledger.evidence import EvidenceText, has_stored_texts, stored_texts
from factloom.model.embedder import Embedder
from factloom.platform.ingest import service as ingest
from factloom.platform.ingest.schemas import FactIn
from factloom.platform.migrate import migrate_sql
from factloom.verify import Claim
from factloom.verify.text_evidence import TextEvidenceVerifier
from tests.support.api import submission_ids, wait_status

pytestmark = pytest.mark.integration

FILM = "It rained all week. Blade Runner is a 1982 film directed by Ridley Scott."


def _submit(db: Database, kb: str, rows: list[tuple[str, str, str, str | None, Status]]) -> list[str]:
    """Submit ``(subject, predicate, object, evidence text, status)`` rows, oldest first, one minute apart,
    and set their status as if checked."""
    facts = [FactIn.model_validate({"subject": s, "predicate": p, "object": o, "source": "probe",
                                    "evidence": {"text": t} if t else None}) for s, p, o, t, _ in rows]
    ids = ingest.submit(db=db, kb=kb, facts=facts, max_facts=50, api_key_id=None).ids
    start = datetime.now(UTC) - timedelta(hours=1)
    with db.session() as session:
        for i, (sid, row) in enumerate(zip(ids, rows, strict=True)):
            session.execute(update(FactSubmission).where(FactSubmission.id == sid)
                            .values(status=row[4], created_at=start + timedelta(minutes=i)))
    return ids


def _stored_texts_case(db: Database) -> None:
    kb = f"ev-ledger-{datetime.now(UTC).timestamp():.0f}"
    ids = _submit(db, kb, [
        ("Blade Runner", "release_year", "1982", "oldest text", Status.committed),
        ("Blade Runner", "directed_by", "Ridley Scott", "reviewed text", Status.reviewed),
        ("Blade Runner", "starred_actors", "Harrison Ford", "rejected text", Status.rejected),
        ("Blade Runner", "genre", "Science Fiction", "waiting text", Status.needs_review),
        ("Blade Runner", "language", "English", None, Status.committed),
        ("Alien", "directed_by", "Ridley Scott", "newest text", Status.accepted),
        ("Émile Zola", "wrote", "Germinal", "zola text", Status.committed),
    ])
    _submit(db, f"{kb}-other", [("Blade Runner", "country", "USA", "other kb", Status.committed)])

    found = stored_texts(db, kb, ["blade runner", "Ridley Scott", "Nobody", "ÉMILE ZOLA"], per_entity=8)
    assert [e.text for e in found["blade runner"]] == ["reviewed text", "oldest text"]  # any case; judged true only
    assert [e.text for e in found["Ridley Scott"]] == ["newest text", "reviewed text"]  # as the object
    assert found["Ridley Scott"][0] == EvidenceText("Ridley Scott", ids[5], found["Ridley Scott"][0].fact_id,
                                                    "newest text")
    assert [e.text for e in found["ÉMILE ZOLA"]] == ["zola text"]  # non-ASCII capitals, on SQLite too
    assert "Nobody" not in found
    # the bound holds per entity and side, in SQL: only the most recent
    assert [e.text for e in stored_texts(db, kb, ["Blade Runner"], per_entity=1)["Blade Runner"]] == ["reviewed text"]
    assert stored_texts(db, kb, []) == {}
    # whether a kb has any at all: only judged-true submissions' texts count
    assert has_stored_texts(db, kb) and has_stored_texts(db, f"{kb}-other")
    _submit(db, f"{kb}-none", [("Alien", "genre", "Horror", "rejected text", Status.rejected),
                               ("Alien", "language", "English", None, Status.committed)])
    assert not has_stored_texts(db, f"{kb}-none")


def test_stored_texts_reads_judged_true_evidence_most_recent_first_within_the_bound(db: Database) -> None:
    _stored_texts_case(db)


def test_stored_texts_on_postgres(postgres_url: str) -> None:
    migrate_sql(postgres_url)
    pg = Database(postgres_url)
    try:
        _stored_texts_case(pg)
    finally:
        pg.dispose()


def test_stored_evidence_supports_only_a_claim_it_states() -> None:
    """The verifier alone, with the bundled sentence model, on stored texts as the ledger returns them."""
    emb = Embedder(None, device="cpu")
    stored = {"Blade Runner": [EvidenceText("Blade Runner", "s0", "fact-a", FILM)],
              "Ridley Scott": [EvidenceText("Ridley Scott", "s0", "fact-a", FILM)]}
    verifier = TextEvidenceVerifier(emb.encode, version=emb.version).with_stored(stored)

    def claim(s: str, p: str, o: str) -> Claim:
        return Claim(submission_id=f"{s}{p}{o}", fact_id="f", subject=s, predicate=p, object=o)

    supported, other_director, born, unrelated = verifier.check([
        claim("Ridley Scott", "directed", "Blade Runner"),
        claim("Blade Runner", "directed_by", "Steven Spielberg"),  # about the film, but the text never names him
        claim("Ridley Scott", "born_in", "South Shields"),
        claim("Alien", "written_by", "Dan O'Bannon"),
    ], {}, datetime.now(UTC))
    assert supported.probability is not None and supported.probability > 0.9
    assert supported.explanation.startswith("supported by stored evidence of fact fact-a")
    assert "directed by Ridley Scott" in supported.explanation and supported.details["stored"] is True
    for r in (other_director, born):
        assert r.probability is None and "names both" in r.explanation
    assert unrelated.probability is None and "no stored evidence about 'Alien'" in unrelated.explanation
    # a claim with its own evidence text is judged on that text alone, as before
    [own] = verifier.check([Claim(submission_id="x", fact_id="f", subject="Ridley Scott", predicate="directed",
                                  object="Blade Runner", evidence_text="Bananas are rich in potassium.")],
                           {}, datetime.now(UTC))
    assert own.probability is not None and own.probability < 0.5 and "stored" not in own.details
    # the per-call bound: with room for no stored sentence, nothing is read and the verifier says so
    [capped] = TextEvidenceVerifier(emb.encode, max_stored=0).with_stored(stored).check(
        [claim("Ridley Scott", "directed", "Blade Runner")], {}, datetime.now(UTC))
    assert capped.probability is None and "bound of 0 sentences" in capped.explanation


def test_a_fact_without_text_is_supported_by_stored_evidence_through_the_worker(
    api: httpx.Client, db: Database
) -> None:
    kb = "ev-stored"
    first = api.post("/v1/facts", json={"kb": kb, "facts": [
        {"subject": "Blade Runner", "predicate": "release_year", "object": "1982", "source": "critic",
         "evidence": {"text": FILM}}]})
    assert first.status_code == 202, first.text
    (with_text,) = submission_ids(db, first.json()["batch_id"])
    stored_fact = wait_status(api, with_text, "committed")["fact_id"]

    later = api.post("/v1/facts", json={"kb": kb, "facts": [
        {"subject": "Blade Runner", "predicate": "directed_by", "object": "Ridley Scott", "source": "critic"},
        {"subject": "Alien", "predicate": "written_by", "object": "Dan O'Bannon", "source": "critic"}]})
    assert later.status_code == 202, later.text
    supported, unrelated = submission_ids(db, later.json()["batch_id"])

    item = wait_status(api, supported, "committed")
    text = next(c for c in item["checks"] if c["verifier"] == "text_evidence")
    assert text["probability"] > 0.9 and text["model_version"] == "all-MiniLM-L6-v2"
    assert text["explanation"].startswith(f"supported by stored evidence of fact {stored_fact}")
    assert "directed by Ridley Scott" in text["explanation"]
    assert text["details"]["fact_id"] == stored_fact and text["details"]["stored"] is True
    assert "text_evidence" not in item["fusion"]["abstained"]

    item = wait_status(api, unrelated, "committed")
    text = next(c for c in item["checks"] if c["verifier"] == "text_evidence")
    assert text["probability"] is None and "no stored evidence about 'Alien'" in text["explanation"]
    assert "text_evidence" in item["fusion"]["abstained"]
