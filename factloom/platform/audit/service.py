"""Reading the audit trail: one row per write, newest first.

What writes a row: ``ingest.batch`` (a batch of facts taken), ``feedback.add``, ``review.<decision>``
and ``review.correct`` (a decision, an admin's correction), ``model.activate`` and ``model.promote``
(a version put into service by hand or by the learner's gates), ``key.create|revoke|rotate``,
``user.create|disable|enable``. Each names its ``actor`` (``key:NAME#ID``, ``user:NAME``,
``learner``, ``system``) and its ``target``.
"""

from __future__ import annotations

from factloom.ledger import AuditEvent, Database, newest_first

__all__ = ["list_events"]


def list_events(*, db: Database, action: str | None = None, actor: str | None = None, target: str | None = None,
                before: int | None = None, limit: int = 100) -> list[AuditEvent]:
    """Newest first. ``action`` matches a whole action (``key.revoke``) or its family (``key``);
    ``actor`` and ``target`` match exactly; ``before`` pages on, past the row of that id."""
    family = [] if not action else [
        (AuditEvent.action == action) | AuditEvent.action.startswith(action + ".", autoescape=True)]
    return newest_first(db, AuditEvent, *family, before=before, limit=limit, actor=actor, target=target)
