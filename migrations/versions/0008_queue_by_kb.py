"""The review queue: why each item waits (``review_reason``, filled in for the items already waiting),
a kb's queue by (kb, status, created_at | probability, id), the decisions by time and the facts by
commit time (the batches page's last hour).

Before the kb indexes SQLite's planner found a kb's waiting items through ``(kb, lower(object))`` and
read every submission of the kb: 1-2 s for the demo kb's queue with 127,000 committed facts beside it.

Revision ID: 0008_queue_by_kb
Revises: 0007_sign_in
"""

from __future__ import annotations

from types import SimpleNamespace

import sqlalchemy as sa
from alembic import op

from factloom.verify.reasons import review_reason

revision: str = "0008_queue_by_kb"
down_revision: str | None = "0007_sign_in"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("fact_submission", schema=None) as batch_op:
        batch_op.add_column(sa.Column("review_reason", sa.String(length=32), nullable=True))
        batch_op.create_index("ix_submission_kb_status_created", ["kb", "status", "created_at", "id"], unique=False)
        batch_op.create_index("ix_submission_kb_status_probability", ["kb", "status", "probability", "id"],
                              unique=False)
        batch_op.create_index("ix_submission_kb_status_claim", ["kb", "status", "subject", "predicate"], unique=False)
        batch_op.create_index("ix_submission_committed", ["committed_at"], unique=False)
        batch_op.create_index("ix_submission_kb_committed", ["kb", "committed_at"], unique=False)
        batch_op.create_index("ix_submission_batch_status", ["batch_id", "status", "committed_at"], unique=False)
    op.create_index("ix_review_decision_created", "review_decision", ["created_at"], unique=False)
    _fill_reasons()


def _fill_reasons() -> None:
    """The reason of every item waiting for review, from its stored verifier results."""
    connection = op.get_bind()
    submissions = sa.table("fact_submission", sa.column("id"), sa.column("review_reason"))
    checks = sa.table("check_result", sa.column("submission_id"), sa.column("verifier"), sa.column("probability"),
                      sa.column("details", sa.JSON()))
    waiting = sa.select(submissions.c.id).where(sa.text("status = 'needs_review'"))  # an enum on PostgreSQL
    results: dict[str, list[SimpleNamespace]] = {}
    for sid, verifier, probability, details in connection.execute(
            sa.select(checks.c.submission_id, checks.c.verifier, checks.c.probability, checks.c.details)
            .where(checks.c.submission_id.in_(waiting))):
        results.setdefault(sid, []).append(SimpleNamespace(verifier=verifier, probability=probability,
                                                           details=details or {}))
    by_reason: dict[str, list[str]] = {}
    for sid, rows in results.items():
        by_reason.setdefault(review_reason(rows), []).append(sid)
    for reason, ids in by_reason.items():
        for start in range(0, len(ids), 500):
            connection.execute(sa.update(submissions).where(submissions.c.id.in_(ids[start:start + 500]))
                               .values(review_reason=reason))


def downgrade() -> None:
    op.drop_index("ix_review_decision_created", table_name="review_decision")
    with op.batch_alter_table("fact_submission", schema=None) as batch_op:
        batch_op.drop_index("ix_submission_batch_status")
        batch_op.drop_index("ix_submission_kb_committed")
        batch_op.drop_index("ix_submission_committed")
        batch_op.drop_index("ix_submission_kb_status_claim")
        batch_op.drop_index("ix_submission_kb_status_probability")
        batch_op.drop_index("ix_submission_kb_status_created")
        batch_op.drop_column("review_reason")
