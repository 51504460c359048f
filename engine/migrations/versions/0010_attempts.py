"""Durable attempts (issue 11): ``stepwise_attempts``, one row per attempt of a step that
declares ``heartbeat_timeout``, ``attempt_timeout`` or ``recover``: its start, heartbeats,
progress, checkpoint, deadlines and end (engine/attempt.py).

Revision ID: 0010_attempts
Revises: 0009_schedules
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0010_attempts"
down_revision: str | Sequence[str] | None = "0009_schedules"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "stepwise_attempts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("step_id", sa.BigInteger(), nullable=False),
        sa.Column("action_id", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("enqueued_at", sa.DateTime(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=True),
        sa.Column("progress", sa.JSON(), nullable=True),
        sa.Column("checkpoint", sa.JSON(), nullable=True),
        sa.Column("worker", sa.String(length=255), nullable=True),
        sa.Column("lost_at", sa.DateTime(), nullable=True),
        sa.Column("deadline_at", sa.DateTime(), nullable=True),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.Column("outcome", sa.String(length=20), nullable=True),
        sa.Column("error_class", sa.String(length=255), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_stepwise_attempts"),
        sa.UniqueConstraint("step_id", "attempt", name="uq_stepwise_attempts_step_id_attempt"),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_stepwise_attempts_open",
        "stepwise_attempts",
        ["id"],
        sqlite_where=sa.text("ended_at IS NULL"),
        postgresql_where=sa.text("ended_at IS NULL"),
    )
    op.create_index("ix_stepwise_attempts_started_at", "stepwise_attempts", ["started_at"])


def downgrade() -> None:
    op.drop_index("ix_stepwise_attempts_started_at", table_name="stepwise_attempts")
    op.drop_index("ix_stepwise_attempts_open", table_name="stepwise_attempts")
    op.drop_table("stepwise_attempts")
