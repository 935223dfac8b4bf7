"""Answer feedback: record people's word on answers, a batch in one transaction, and list it back.

The learn task reads these rows to turn a kb's feedback into training questions for its router and
reasoner; this module only writes and lists them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import select

from factloom.graph import Neo4jStore
from factloom.graph.errors import GraphUnavailable, InvalidGraphInput
from factloom.ledger import AnswerFeedback, AuditEvent, Database
from factloom.platform.errors import BadRequest, NotFound, Unavailable
from factloom.platform.feedback.schemas import FeedbackItem
from factloom.platform.metrics import FEEDBACK

__all__ = ["require_kb", "record", "list_feedback"]


def require_kb(*, store: Neo4jStore, kb: str) -> None:
    """Refuse a kb that holds no entity, as ``/v1/query`` does: most likely a misspelt name, and
    feedback on it could never become a training question."""
    try:
        exists = store.has_entities(kb)
    except InvalidGraphInput as exc:
        raise BadRequest(str(exc)) from exc
    except GraphUnavailable as exc:
        raise Unavailable(str(exc)) from exc
    if not exists:
        raise NotFound(f"knowledge base {kb!r} holds no entities: check its name (a kb appears with "
                       f"its first committed fact)")


def record(*, db: Database, kb: str, items: Sequence[FeedbackItem], actor: str) -> list[int]:
    """Write ``items`` in one transaction (all or none); their ids, in order."""
    rows = [
        AnswerFeedback(kb=kb, question=i.question, answer=i.answer, correct=i.correct, expected=i.expected,
                       actor=actor, reasoner_version=i.reasoner_version)
        for i in items
    ]
    with db.session() as session:
        session.add_all(rows)
        session.flush()  # assigns the autoincrement ids
        ids = [row.id for row in rows]
        session.add(AuditEvent(actor=actor, action="feedback.add", target=f"kb:{kb}",
                               details={"count": len(ids), "ids": [ids[0], ids[-1]] if ids else []}))
    for correct in (True, False):
        n = sum(1 for i in items if i.correct is correct)
        if n:
            FEEDBACK.labels(kb, str(correct).lower()).inc(n)
    return ids


def list_feedback(*, db: Database, kb: str | None, limit: int,
                  kbs: Collection[str] | None = None) -> list[AnswerFeedback]:
    """The newest ``limit`` items, of one kb or of all; ``kbs`` (``None``: every kb) narrows it."""
    query = select(AnswerFeedback)
    if kb:
        query = query.where(AnswerFeedback.kb == kb)
    if kbs is not None:
        query = query.where(AnswerFeedback.kb.in_(sorted(kbs)))
    with db.session() as session:
        return list(session.scalars(
            query.order_by(AnswerFeedback.created_at.desc(), AnswerFeedback.id.desc()).limit(limit)
        ).all())
