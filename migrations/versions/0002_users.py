"""user_account: people who sign in to the admin UI; the review queue's keyset indexes.

Revision ID: 0002_users
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002_users"
down_revision: str | None = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "user_account",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("password_hash", sa.String(length=300), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    with op.batch_alter_table("fact_submission", schema=None) as batch_op:
        batch_op.create_index("ix_submission_status_created", ["status", "created_at", "id"], unique=False)
        batch_op.create_index("ix_submission_status_probability", ["status", "probability", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("fact_submission", schema=None) as batch_op:
        batch_op.drop_index("ix_submission_status_probability")
        batch_op.drop_index("ix_submission_status_created")
    op.drop_table("user_account")
