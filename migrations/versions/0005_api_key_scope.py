"""API keys gain a kb scope (``kbs``, a JSON list; null: every kb) and an optional expiry
(``expires_at``); ``revoked_at`` was there already and is now set by revoke and rotate.

Revision ID: 0005_api_key_scope
Revises: 0004_continual_learning
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005_api_key_scope"
down_revision: str | None = "0004_continual_learning"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_key", schema=None) as batch_op:
        batch_op.add_column(sa.Column("kbs", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_key", schema=None) as batch_op:
        batch_op.drop_column("expires_at")
        batch_op.drop_column("kbs")
