"""Continual learning: model_version gains kb, parent and watermark columns (kb moves out of the
metrics JSON); answer_feedback holds people's word on answers, which the learn task trains on.

Revision ID: 0004_continual_learning
Revises: 0003_evidence_lookup
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004_continual_learning"
down_revision: str | None = "0003_evidence_lookup"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("model_version", schema=None) as batch_op:
        batch_op.add_column(sa.Column("kb", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("parent", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("watermark", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index("ix_model_version_kind_kb_status", ["kind", "kb", "status"], unique=False)
    # the kb sat in the metrics JSON, which SQLite and PostgreSQL read differently: move it row by row
    versions = sa.table("model_version", sa.column("id", sa.String), sa.column("kb", sa.String),
                        sa.column("metrics", sa.JSON))
    connection = op.get_bind()
    for version, metrics in connection.execute(sa.select(versions.c.id, versions.c.metrics)).all():
        kb = (metrics or {}).get("kb")
        if kb is not None:
            connection.execute(versions.update().where(versions.c.id == version).values(kb=str(kb)))
    op.create_table(
        "answer_feedback",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kb", sa.String(length=64), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("correct", sa.Boolean(), nullable=False),
        sa.Column("expected", sa.Text(), nullable=True),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("reasoner_version", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_feedback_kb_created", "answer_feedback", ["kb", "created_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_feedback_kb_created", table_name="answer_feedback")
    op.drop_table("answer_feedback")
    with op.batch_alter_table("model_version", schema=None) as batch_op:
        batch_op.drop_index("ix_model_version_kind_kb_status")
        batch_op.drop_column("watermark")
        batch_op.drop_column("parent")
        batch_op.drop_column("kb")
