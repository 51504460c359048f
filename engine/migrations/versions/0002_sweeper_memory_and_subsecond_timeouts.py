"""Sub-second timeouts (issue 9).

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


def upgrade() -> None:
    replace_column("stepwise_actions", "timeout_seconds", sa.Double(), "timeout_seconds_old")


def downgrade() -> None:
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
