"""Live certification: ``audit_sample`` (the automatically decided facts sent to the blind audit, and
their audit labels) and ``certification_run`` (each re-certification of a kb's thresholds, its audit
ledger and figures).

Revision ID: 0009_live_certification
Revises: 0008_queue_by_kb
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0009_live_certification"
down_revision: str | None = "0008_queue_by_kb"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_sample",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("submission_id", sa.String(length=32), nullable=False),
        sa.Column("kb", sa.String(length=64), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.Column("probability", sa.Float(), nullable=False),
        sa.Column("stratum", sa.Integer(), nullable=False),
        sa.Column("inclusion", sa.Float(), nullable=False),
        sa.Column("fusion_version", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("label", sa.String(length=16), nullable=True),
        sa.Column("labelled_by", sa.String(length=200), nullable=True),
        sa.Column("labelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["submission_id"], ["fact_submission.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("submission_id"),
    )
    op.create_index("ix_audit_sample_kb_label_created", "audit_sample", ["kb", "label", "created_at"], unique=False)
    op.create_table(
        "certification_run",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kb", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("watermark", sa.DateTime(timezone=True), nullable=False),
        sa.Column("fusion_version", sa.String(length=64), nullable=True),
        sa.Column("registered", sa.String(length=64), nullable=True),
        sa.Column("figures", sa.JSON(), nullable=False),
        sa.Column("ledger", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_certification_run_kb_created", "certification_run", ["kb", "created_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_certification_run_kb_created", table_name="certification_run")
    op.drop_table("certification_run")
    op.drop_index("ix_audit_sample_kb_label_created", table_name="audit_sample")
    op.drop_table("audit_sample")
