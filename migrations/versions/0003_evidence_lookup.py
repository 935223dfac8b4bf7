"""fact_submission: case-folded subject / object indexes for the stored-evidence lookup of text evidence.

Revision ID: 0003_evidence_lookup
Revises: 0002_users
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003_evidence_lookup"
down_revision: str | None = "0002_users"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_submission_kb_subject_lower", "fact_submission", ["kb", sa.text("lower(subject)")])
    op.create_index("ix_submission_kb_object_lower", "fact_submission", ["kb", sa.text("lower(object)")])


def downgrade() -> None:
    op.drop_index("ix_submission_kb_object_lower", table_name="fact_submission")
    op.drop_index("ix_submission_kb_subject_lower", table_name="fact_submission")
