"""SQLAlchemy 2 tables of the ledger. Alembic revisions in ``migrations/`` create them.

A submission moves ``pending → checking → accepted | rejected | needs_review``; an accepted or
reviewed-and-accepted one becomes ``committed`` once its fact is in Neo4j (``reviewed`` sits between
a reviewer's accept and that write).
"""

from __future__ import annotations

import enum
import uuid
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    func,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

__all__ = [
    "Base", "Status", "Decision", "DECISIONS_THAT_HOLD", "IngestBatch", "FactSubmission", "CheckResult",
    "ReviewDecision",
    "AuditEvent", "ModelVersion", "VersionStatus", "AnswerFeedback", "ApiKey", "AlertEvent", "UserAccount", "SignIn",
    "AuditSample", "AUDIT_LABELS", "CertificationRun",
    "UtcDateTime", "utcnow",
    "as_utc", "new_id",
]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def as_utc(value: datetime) -> datetime:
    """``value`` in UTC, aware of it; a naive value is taken as UTC already (the ledger's rule)."""
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def new_id() -> str:
    return uuid.uuid4().hex


class Status(str, enum.Enum):
    pending = "pending"
    checking = "checking"
    accepted = "accepted"
    rejected = "rejected"
    needs_review = "needs_review"
    reviewed = "reviewed"
    committed = "committed"


class UtcDateTime(TypeDecorator[datetime]):
    """Every ledger instant, in UTC and aware of it, whatever the database keeps.

    PostgreSQL keeps the zone (``timestamptz``); SQLite keeps none and hands back a naive value.
    Written: converted to UTC (a naive value is taken as UTC already). Read: a naive value gets the
    UTC zone, an aware one is converted to UTC. Comparisons in queries go through the same
    conversion, so Python code never sees a naive ledger instant.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        value = as_utc(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        return None if value is None else as_utc(value)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, datetime: UtcDateTime()}


class IngestBatch(Base):
    __tablename__ = "ingest_batch"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    kb: Mapped[str] = mapped_column(String(64), index=True)
    api_key_id: Mapped[str | None] = mapped_column(String(32))
    count: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class FactSubmission(Base):
    __tablename__ = "fact_submission"
    __table_args__ = (
        UniqueConstraint("kb", "key", name="uq_submission_kb_key"),
        Index("ix_submission_status_updated", "status", "updated_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    batch_id: Mapped[str] = mapped_column(ForeignKey("ingest_batch.id"), index=True)
    kb: Mapped[str] = mapped_column(String(64))
    # the idempotency key: given by the client, or derived from (kb, subject, predicate, object, source)
    key: Mapped[str] = mapped_column(String(200))
    # the graph fact this submission asserts: one per (kb, subject, predicate, object), whatever the source
    fact_id: Mapped[str] = mapped_column(String(32), index=True)
    subject: Mapped[str] = mapped_column(Text)
    predicate: Mapped[str] = mapped_column(String(200), index=True)
    object: Mapped[str] = mapped_column(Text)
    source: Mapped[str | None] = mapped_column(String(1000), index=True)
    valid_from: Mapped[datetime | None]
    valid_to: Mapped[datetime | None]
    evidence: Mapped[dict[str, Any] | None]
    status: Mapped[Status] = mapped_column(default=Status.pending)
    probability: Mapped[float | None] = mapped_column(Float)
    verdict_reason: Mapped[str | None] = mapped_column(Text)
    # which check sent it to review (factloom.verify.reasons); None for a fact decided without review
    review_reason: Mapped[str | None] = mapped_column(String(32))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    committed_at: Mapped[datetime | None]

    checks: Mapped[list[CheckResult]] = relationship(
        back_populates="submission", order_by="CheckResult.created_at", cascade="all, delete-orphan"
    )


class CheckResult(Base):
    """One verifier's result for one submission; ``verifier='fusion'`` holds the fused verdict."""

    __tablename__ = "check_result"
    __table_args__ = (UniqueConstraint("submission_id", "verifier", name="uq_check_submission_verifier"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("fact_submission.id"), index=True)
    verifier: Mapped[str] = mapped_column(String(64))
    score: Mapped[float | None] = mapped_column(Float)
    probability: Mapped[float | None] = mapped_column(Float)
    explanation: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[dict[str, Any] | None]
    model_version: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    submission: Mapped[FactSubmission] = relationship(back_populates="checks")


# the review decisions that say the claimed fact holds: ``keep_both`` too (it holds beside another value)
class Decision(str, enum.Enum):
    """What a reviewer decided about a claim (``review_decision.decision`` holds the value)."""

    accept = "accept"  # it holds; a new value of a functional predicate replaces the current one
    keep_both = "keep_both"  # it holds beside the current value (two things of one name, a repeatable value)
    reject = "reject"  # it never reaches the graph

    @property
    def holds(self) -> bool:
        """Whether the claim is true by this decision: wherever a label is derived from a decision."""
        return self is not Decision.reject


DECISIONS_THAT_HOLD = frozenset(d.value for d in Decision if d.holds)


class ReviewDecision(Base):
    __tablename__ = "review_decision"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("fact_submission.id"), index=True)
    decision: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    reviewer: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AuditEvent(Base):
    __tablename__ = "audit_event"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(64), index=True)
    target: Mapped[str] = mapped_column(String(200))
    details: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class VersionStatus(str, enum.Enum):
    """Where a registered model version stands; one ``active`` per kind and kb, and at most one on
    trial (``shadow`` or ``ab``) beside it."""

    candidate = "candidate"  # trained, not serving: waiting for its gates, or failed them
    shadow = "shadow"  # answers beside the active version; its answers are compared, never returned
    ab = "ab"  # answers ``traffic_share`` of the kb's questions (sticky per API key)
    active = "active"
    retired = "retired"  # served once, replaced by a newer version
    rolled_back = "rolled_back"  # served once, taken off because it failed in service


class ModelVersion(Base):
    __tablename__ = "model_version"
    __table_args__ = (Index("ix_model_version_kind_kb_status", "kind", "kb", "status"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    # the knowledge base this version serves
    kb: Mapped[str | None] = mapped_column(String(64))
    artefact: Mapped[str] = mapped_column(Text)
    metrics: Mapped[dict[str, Any] | None]
    # {"passed": bool, gate name → {"value", "parent", "threshold", "passed"}}; empty for a hand-run train
    gates: Mapped[dict[str, Any] | None]
    status: Mapped[str] = mapped_column(String(16), default=VersionStatus.candidate.value)
    traffic_share: Mapped[float] = mapped_column(Float, default=0.0)
    # the version this one was updated from (continual learning); None for one trained from scratch
    parent: Mapped[str | None] = mapped_column(String(64))
    # what it learned from: facts committed, or feedback given, up to this instant
    watermark: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AnswerFeedback(Base):
    """A person's word on one answer to a question: right or wrong, and the right answer where given.

    The learn task turns a kb's feedback into training questions for its router and reasoner."""

    __tablename__ = "answer_feedback"
    __table_args__ = (Index("ix_feedback_kb_created", "kb", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kb: Mapped[str] = mapped_column(String(64))
    question: Mapped[str] = mapped_column(Text)
    answer: Mapped[str] = mapped_column(Text)  # the answer's name, as the API returned it
    correct: Mapped[bool]
    expected: Mapped[str | None] = mapped_column(Text)  # the right answer's name, where the answer was wrong
    # who said so: an API key id, an admin user, or "demo"
    actor: Mapped[str] = mapped_column(String(200))
    reasoner_version: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiKey(Base):
    __tablename__ = "api_key"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200))
    prefix: Mapped[str] = mapped_column(String(16), unique=True)
    key_hash: Mapped[str] = mapped_column(String(64))
    scopes: Mapped[str] = mapped_column(String(200))  # comma separated, from SCOPES
    # the knowledge bases the key may read and write; None: all of them
    kbs: Mapped[list[str] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]


class AlertEvent(Base):
    """One alert as Alertmanager last posted it to ``POST /v1/alerts``: one row per firing of an alert
    (its fingerprint and when it started), updated in place when it resolves or is sent again."""

    __tablename__ = "alert_event"
    __table_args__ = (
        UniqueConstraint("fingerprint", "starts_at", name="uq_alert_fingerprint_starts"),
        Index("ix_alert_status_received", "status", "received_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    alertname: Mapped[str] = mapped_column(String(200), index=True)
    status: Mapped[str] = mapped_column(String(16))  # firing | resolved
    severity: Mapped[str | None] = mapped_column(String(32))
    kb: Mapped[str | None] = mapped_column(String(64))
    summary: Mapped[str] = mapped_column(Text, default="")
    labels: Mapped[dict[str, Any] | None]
    annotations: Mapped[dict[str, Any] | None]
    starts_at: Mapped[datetime]
    ends_at: Mapped[datetime | None]
    received_at: Mapped[datetime] = mapped_column(default=utcnow)


class UserAccount(Base):
    """A person who signs in to the admin UI; ``password_hash`` is ``scrypt$n$r$p$salt$hash`` (hex)."""

    __tablename__ = "user_account"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    role: Mapped[str] = mapped_column(String(16))  # reviewer | admin
    password_hash: Mapped[str] = mapped_column(String(300))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    disabled_at: Mapped[datetime | None]


class SignIn(Base):
    """One signed-in browser of the admin UI; its cookie names the row by ``id`` (a random token).

    The cookie alone proves nothing once the row is revoked: signing out revokes this row, a password
    change or disabling the account revokes every row of the account.
    """

    __tablename__ = "sign_in"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("user_account.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


# an auditor's word on a sampled fact: the claim holds, or it does not ("can't tell" leaves it unlabelled)
AUDIT_LABELS = ("holds", "does_not_hold")


class AuditSample(Base):
    """A fact the fusion decided by itself (accepted or rejected) that was also sent to the blind audit.

    Written by the check worker in the transaction that writes the verdict; ``inclusion`` is the
    probability it had of being sampled (its stratum's rate), so an audit label weighs ``1 / inclusion``
    (factloom.verify.audit). The label never changes the fact by itself (factloom.platform.audit).
    """

    __tablename__ = "audit_sample"
    __table_args__ = (Index("ix_audit_sample_kb_label_created", "kb", "label", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("fact_submission.id"), unique=True)
    kb: Mapped[str] = mapped_column(String(64))
    verdict: Mapped[str] = mapped_column(String(16))  # accepted | rejected: what the fusion decided
    probability: Mapped[float] = mapped_column(Float)  # the fused probability it was decided with
    stratum: Mapped[int] = mapped_column(Integer)
    inclusion: Mapped[float] = mapped_column(Float)
    fusion_version: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    label: Mapped[str | None] = mapped_column(String(16))  # AUDIT_LABELS; None: not audited yet
    labelled_by: Mapped[str | None] = mapped_column(String(200))
    labelled_at: Mapped[datetime | None]


class CertificationRun(Base):
    """One re-certification of a kb's thresholds (factloom.learn.certification): the audit ledger's
    state after it (``ledger``, ``AuditLedger.as_dict``), the figures people see, and the fusion
    version it registered when a threshold moved. The newest row per kb is the kb's live state."""

    __tablename__ = "certification_run"
    __table_args__ = (Index("ix_certification_run_kb_created", "kb", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kb: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # the labels up to this instant are in ``ledger``; the next run adds those after it
    watermark: Mapped[datetime]
    fusion_version: Mapped[str | None] = mapped_column(String(64))  # in service after the run
    registered: Mapped[str | None] = mapped_column(String(64))  # the version this run registered, if any
    figures: Mapped[dict[str, Any]]
    ledger: Mapped[dict[str, Any] | None]


# the admin review queue pages through one status at a time by age or by probability (keyset order),
# of every kb or of one: a kb's queue must not be found by reading every submission the kb ever had
Index("ix_submission_status_created", FactSubmission.status, FactSubmission.created_at, FactSubmission.id)
Index("ix_submission_status_probability", FactSubmission.status, FactSubmission.probability, FactSubmission.id)
Index("ix_submission_kb_status_created", FactSubmission.kb, FactSubmission.status, FactSubmission.created_at,
      FactSubmission.id)
Index("ix_submission_kb_status_probability", FactSubmission.kb, FactSubmission.status, FactSubmission.probability,
      FactSubmission.id)
# a kb's waiting rival values, grouped by (subject, predicate) straight off the index
Index("ix_submission_kb_status_claim", FactSubmission.kb, FactSubmission.status, FactSubmission.subject,
      FactSubmission.predicate)
# reviewer throughput and "decided today" read the decisions of a time window, the batches page the
# facts committed in the last hour
Index("ix_review_decision_created", ReviewDecision.created_at)
Index("ix_submission_committed", FactSubmission.committed_at)
Index("ix_submission_kb_committed", FactSubmission.kb, FactSubmission.committed_at)
# the batches page counts each listed batch's submissions per status from the index alone
Index("ix_submission_batch_status", FactSubmission.batch_id, FactSubmission.status, FactSubmission.committed_at)
# source trust counts every source's claims judged true and false (workers.verifiers.trust_counts)
Index("ix_submission_status_source", FactSubmission.status, FactSubmission.source)
# text evidence looks up stored evidence about a claim's entities by case-folded name (ledger.evidence.stored_texts)
Index("ix_submission_kb_subject_lower", FactSubmission.kb, func.lower(FactSubmission.subject))
Index("ix_submission_kb_object_lower", FactSubmission.kb, func.lower(FactSubmission.object))
