"""The sweeper's memory, jobs in the outbox, and sub-second timeouts (issue 9).

- ``resend_count`` and ``next_sweep_at`` on the rows the sweeper sends again (invocations,
  steps, and actions for their timeouts): it backs off each re-send and gives up after
  ``sweeper.MAX_RESENDS``. Existing rows start at 0, never sent again.
- ``stepwise_steps.job_sent_at``: a job-backed action's job is confirmed sent on its step;
  until then the sweeper sends it again (a send that failed after commit was lost).
- ``ix_stepwise_invocations_due_waits``: the waits not concluded, by due time, so that a
  sweep no longer walks every long wait not yet due. (``complete_later`` requests need no
  new column: they are invocations of kind "complete".)
- ``stepwise_actions.timeout_seconds`` becomes a DOUBLE (seconds with their fraction): half
  a second was truncated to 0, which meant no timeout at all. The column is replaced rather
  than altered, the same way on SQLite and PostgreSQL: SQLite cannot change a column's
  type without rebuilding the table (which its foreign keys make unsafe), so the new
  column comes last on both, and the model declares it after the timestamps.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-14
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


#: The tables whose rows the sweeper sends again.
SWEPT = ("stepwise_invocations", "stepwise_steps", "stepwise_actions")


def upgrade() -> None:
    replace_column("stepwise_actions", "timeout_seconds", sa.Double(), "timeout_seconds_old")
    for table in SWEPT:
        op.add_column(
            table, sa.Column("resend_count", sa.Integer(), server_default=sa.text("0"), nullable=False)
        )
        op.add_column(table, sa.Column("next_sweep_at", sa.DateTime(), nullable=True))
    op.add_column("stepwise_steps", sa.Column("job_sent_at", sa.DateTime(), nullable=True))
    # The jobs of steps already performed went out the old way: count them as sent, or the
    # sweeper would send every one of them again.
    op.execute(
        "UPDATE stepwise_steps SET job_sent_at = performed_at WHERE performed_at IS NOT NULL "
        "AND action_id IN (SELECT id FROM stepwise_actions WHERE job IS NOT NULL)"
    )
    op.create_index(
        "ix_stepwise_invocations_due_waits",
        "stepwise_invocations",
        ["due_at"],
        unique=False,
        sqlite_where=sa.text("kind = 'wait' AND concluded_at IS NULL"),
        postgresql_where=sa.text("kind = 'wait' AND concluded_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_stepwise_invocations_due_waits", table_name="stepwise_invocations")
    op.drop_column("stepwise_steps", "job_sent_at")
    for table in SWEPT:
        op.drop_column(table, "next_sweep_at")
        op.drop_column(table, "resend_count")
    # Round a fraction of a second up: a timeout of half a second stays a timeout.
    replace_column(
        "stepwise_actions",
        "timeout_seconds",
        sa.Integer(),
        "CASE WHEN timeout_seconds_old > CAST(timeout_seconds_old AS INTEGER) "
        "THEN CAST(timeout_seconds_old AS INTEGER) + 1 ELSE CAST(timeout_seconds_old AS INTEGER) END",
    )


def replace_column(table: str, column: str, type_: sa.types.TypeEngine[Any], value: str) -> None:
    """Give ``column`` the type ``type_`` without rebuilding the table: rename it to
    ``{column}_old``, add the new one, fill it with ``value`` (SQL over the old one), drop
    the old one (SQLite 3.35 and later drop a column in place)."""
    old = f"{column}_old"
    op.execute(f"ALTER TABLE {table} RENAME COLUMN {column} TO {old}")
    op.add_column(table, sa.Column(column, type_, nullable=True))
    op.execute(f"UPDATE {table} SET {column} = {value}")
    op.drop_column(table, old)
