"""The review queue of one kb by (kb, status, created_at | probability, id), and the decisions by time.

Before this, SQLite's planner found a kb's waiting items through ``(kb, lower(object))`` and read
every submission of the kb: 1-2 s for the demo kb's queue with 127,000 committed facts beside it.

Revision ID: 0008_queue_by_kb
Revises: 0007_sign_in
"""

from __future__ import annotations

from alembic import op

revision: str = "0008_queue_by_kb"
down_revision: str | None = "0007_sign_in"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("fact_submission", schema=None) as batch_op:
        batch_op.create_index("ix_submission_kb_status_created", ["kb", "status", "created_at", "id"], unique=False)
        batch_op.create_index("ix_submission_kb_status_probability", ["kb", "status", "probability", "id"],
                              unique=False)
    op.create_index("ix_review_decision_created", "review_decision", ["created_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_review_decision_created", table_name="review_decision")
    with op.batch_alter_table("fact_submission", schema=None) as batch_op:
        batch_op.drop_index("ix_submission_kb_status_probability")
        batch_op.drop_index("ix_submission_kb_status_created")
