"""sign_in: the admin UI's sessions, kept server-side so that signing out, a password change or
disabling an account ends them (the cookie names a row; a revoked row is refused).

Revision ID: 0007_sign_in
Revises: 0006_alert_event
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007_sign_in"
down_revision: str | None = "0006_alert_event"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sign_in",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["user_account.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_sign_in_user_id", "sign_in", ["user_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_sign_in_user_id", table_name="sign_in")
    op.drop_table("sign_in")
