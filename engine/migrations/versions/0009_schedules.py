"""Schedules (issue 11): cron or interval rules that start an action on an actor, and one
row per (schedule, tick) that makes each tick fire exactly once.

- ``stepwise_schedules``: the rule, its time zone, the actor, action and arguments, the
  missed and overlap policies, paused state and the next tick (partial index of the
  active ones by ``next_fire_at``: the clock's one query).
- ``stepwise_schedule_ticks``: each tick fired, skipped (overlap) or missed, unique by
  (schedule, due time, manual), with the invocation it made and its lag.

Revision ID: 0009_schedules
Revises: 0008_studio
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0009_schedules"
down_revision: str | Sequence[str] | None = "0008_studio"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "stepwise_schedules",
        sa.Column("id", ID, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("cron", sa.String(length=200), nullable=True),
        sa.Column("every_seconds", sa.BigInteger(), nullable=True),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("actor_type", sa.String(length=255), nullable=False),
        sa.Column("actor_id", sa.String(length=255), nullable=False),
        sa.Column("action", sa.String(length=255), nullable=False),
        sa.Column("arguments", sa.JSON(), nullable=False),
        sa.Column("missed", sa.String(length=10), nullable=False),
        sa.Column("overlap", sa.String(length=10), nullable=False),
        sa.Column("source", sa.String(length=10), nullable=False),
        sa.Column("paused_at", sa.DateTime(), nullable=True),
        sa.Column("paused_by", sa.String(length=255), nullable=True),
        sa.Column("next_fire_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stepwise_schedules")),
        sqlite_autoincrement=True,
    )
    op.create_index("uq_stepwise_schedules_name", "stepwise_schedules", ["name"], unique=True)
    op.create_index(
        "ix_stepwise_schedules_due",
        "stepwise_schedules",
        ["next_fire_at"],
        unique=False,
        sqlite_where=sa.text("paused_at IS NULL"),
        postgresql_where=sa.text("paused_at IS NULL"),
    )
    op.create_table(
        "stepwise_schedule_ticks",
        sa.Column("id", ID, nullable=False),
        sa.Column("schedule_id", sa.BigInteger(), nullable=False),
        sa.Column("due_at", sa.DateTime(), nullable=False),
        sa.Column("manual", sa.Boolean(), nullable=False),
        sa.Column("fired_at", sa.DateTime(), nullable=False),
        sa.Column("outcome", sa.String(length=10), nullable=False),
        sa.Column("invocation_id", sa.BigInteger(), nullable=True),
        sa.Column("lag_seconds", sa.Float(), nullable=False),
        sa.Column("missed_count", sa.Integer(), nullable=False),
        sa.Column("by", sa.String(length=255), nullable=True),
        sa.Column("note", sa.String(length=500), nullable=True),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["stepwise_schedules.id"],
            name=op.f("fk_stepwise_schedule_ticks_schedule_id_stepwise_schedules"),
        ),
        sa.ForeignKeyConstraint(
            ["invocation_id"],
            ["stepwise_invocations.id"],
            name=op.f("fk_stepwise_schedule_ticks_invocation_id_stepwise_invocations"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stepwise_schedule_ticks")),
        sa.UniqueConstraint("schedule_id", "due_at", "manual", name="uq_stepwise_schedule_ticks_due"),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_stepwise_schedule_ticks_schedule", "stepwise_schedule_ticks", ["schedule_id", "id"], unique=False
    )
    op.create_index(
        "ix_stepwise_schedule_ticks_fired_at", "stepwise_schedule_ticks", ["fired_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_stepwise_schedule_ticks_fired_at", table_name="stepwise_schedule_ticks")
    op.drop_index("ix_stepwise_schedule_ticks_schedule", table_name="stepwise_schedule_ticks")
    op.drop_table("stepwise_schedule_ticks")
    op.drop_index("ix_stepwise_schedules_due", table_name="stepwise_schedules")
    op.drop_index("uq_stepwise_schedules_name", table_name="stepwise_schedules")
    op.drop_table("stepwise_schedules")
