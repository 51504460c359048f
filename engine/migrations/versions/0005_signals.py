"""Signals (issue 10): an action's inbox of named, durable messages.

``stepwise_signals`` keeps each signal from the moment it is sent, whether or not a step
waits for it yet; a wait consumes it once (``consumed_at``, ``consumed_by_id``). Waits for
signals are invocations of kind "wait" named "signal" (their arguments list the names
they wait for), so their deadlines reuse the timers' message and the sweeper's index.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "stepwise_signals",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("action_id", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=True),
        sa.Column("sent_by", sa.String(length=255), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("delivery_key", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("consumed_at", sa.DateTime(), nullable=True),
        sa.Column("consumed_by_id", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["action_id"], ["stepwise_actions.id"], name="fk_stepwise_signals_action_id_stepwise_actions"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_stepwise_signals"),
        sa.UniqueConstraint("action_id", "delivery_key", name="uq_stepwise_signals_action_id_delivery_key"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_stepwise_signals_action", "stepwise_signals", ["action_id", "id"])
    op.create_index(
        "ix_stepwise_signals_inbox",
        "stepwise_signals",
        ["action_id", "id"],
        sqlite_where=sa.text("consumed_at IS NULL"),
        postgresql_where=sa.text("consumed_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_stepwise_signals_inbox", table_name="stepwise_signals")
    op.drop_index("ix_stepwise_signals_action", table_name="stepwise_signals")
    op.drop_table("stepwise_signals")
