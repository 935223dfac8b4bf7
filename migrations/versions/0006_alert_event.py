"""alert_event: the alerts Alertmanager posts to ``POST /v1/alerts``, one row per firing of an alert
(fingerprint and start), its status moving from firing to resolved.

Revision ID: 0006_alert_event
Revises: 0005_api_key_scope
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006_alert_event"
down_revision: str | None = "0005_api_key_scope"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alert_event",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("alertname", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("severity", sa.String(length=32), nullable=True),
        sa.Column("kb", sa.String(length=64), nullable=True),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=True),
        sa.Column("annotations", sa.JSON(), nullable=True),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("fingerprint", "starts_at", name="uq_alert_fingerprint_starts"),
    )
    op.create_index("ix_alert_event_alertname", "alert_event", ["alertname"], unique=False)
    op.create_index("ix_alert_status_received", "alert_event", ["status", "received_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_alert_status_received", table_name="alert_event")
    op.drop_index("ix_alert_event_alertname", table_name="alert_event")
    op.drop_table("alert_event")
