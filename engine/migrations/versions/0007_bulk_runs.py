"""Bulk runs, and failures by error class (issue 12, the studio's operator's day).

- ``stepwise_bulk_runs``: a bulk command (cancel or retry every action of a filter) as
  durable engine work, one row per command beside its audit entry, with the cursor its
  batches advance (``last_id``), so that a worker resumes it where it got to.
- ``ix_stepwise_actions_error_class``: ``(error_class, id)`` of the actions that raised (a
  partial index: the rest have no error). The studio lists the failures of one error class
  newest first, and counts them, reading only that class's entries instead of every failure.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "stepwise_bulk_runs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("audit_entry_id", sa.BigInteger(), nullable=False),
        sa.Column("command", sa.String(length=20), nullable=False),
        sa.Column("filter", sa.JSON(), nullable=False),
        sa.Column("by", sa.String(length=255), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("last_id", sa.BigInteger(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["audit_entry_id"],
            ["stepwise_audit_entries.id"],
            name=op.f("fk_stepwise_bulk_runs_audit_entry_id_stepwise_audit_entries"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stepwise_bulk_runs")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "uq_stepwise_bulk_runs_audit_entry_id", "stepwise_bulk_runs", ["audit_entry_id"], unique=True
    )
    op.create_index(
        "ix_stepwise_actions_error_class",
        "stepwise_actions",
        ["error_class", "id"],
        unique=False,
        sqlite_where=sa.text("error_class IS NOT NULL"),
        postgresql_where=sa.text("error_class IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_stepwise_actions_error_class", table_name="stepwise_actions")
    op.drop_index("uq_stepwise_bulk_runs_audit_entry_id", table_name="stepwise_bulk_runs")
    op.drop_table("stepwise_bulk_runs")
