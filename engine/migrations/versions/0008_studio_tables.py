"""The studio's own tables, made by migrations like the engine's (issue 12).

- ``studio_users``: who may sign in, their role, ``disabled_at`` (an admin disabled them) and
  ``session_generation`` (moved on by signing out or a new password: older session cookies
  stop working).
- ``studio_webhook_deliveries``: the completion webhook's deliveries by completion id (what
  makes it idempotent).

The studio made these with ``db.create_all()`` before: a database that already has them
keeps them (and their rows), and only gains the columns it lacks. The engine never imports
the studio, so the tables are spelled out here; tests/studio/test_studio_tables_are_migrated.py
keeps them equal to the studio's models.

Revision ID: 0008_studio
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0008_studio"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def users_columns() -> list[sa.Column]:  # type: ignore[type-arg]
    return [
        sa.Column("id", sa.Integer(), primary_key=True, nullable=False),
        sa.Column("name", sa.String(length=80), nullable=False, unique=True),
        sa.Column("password_hash", sa.String(length=255), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("last_login_at", sa.DateTime(), nullable=True),
        sa.Column("disabled_at", sa.DateTime(), nullable=True),
        sa.Column("session_generation", sa.Integer(), server_default=sa.text("0"), nullable=False),
    ]


#: Columns added since the studio first made the table with create_all().
NEW_USER_COLUMNS = ("disabled_at", "session_generation")


def upgrade() -> None:
    present = set(sa.inspect(op.get_bind()).get_table_names())
    if "studio_users" not in present:
        op.create_table("studio_users", *users_columns())
    else:
        existing = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("studio_users")}
        for column in users_columns():
            if column.name in NEW_USER_COLUMNS and column.name not in existing:
                op.add_column("studio_users", column)
    if "studio_webhook_deliveries" not in present:
        op.create_table(
            "studio_webhook_deliveries",
            sa.Column("id", sa.String(length=255), primary_key=True, nullable=False),
            sa.Column("fingerprint", sa.String(length=64), nullable=False),
            sa.Column("received_at", sa.DateTime(), nullable=False),
            sa.Column("claimed_at", sa.DateTime(), nullable=False),
            sa.Column("action_id", sa.BigInteger(), nullable=True),
            sa.Column("status_code", sa.Integer(), nullable=True),
            sa.Column("response", sa.JSON(), nullable=True),
            sa.Column("answered_at", sa.DateTime(), nullable=True),
        )


def downgrade() -> None:
    op.drop_table("studio_webhook_deliveries")
    op.drop_table("studio_users")
