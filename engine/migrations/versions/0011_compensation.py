"""Compensation (issue 11): ``stepwise_compensations`` and ``stepwise_actions.compensations_count``.

A step body registers the action that undoes it (``step.compensate``); the row keeps it
until the action finally fails or is cancelled, then its turn, its progress and the step
and child action that ran it. The action counts its registered compensations, so that an
action with none never reads the table. The new ``compensating`` status needs no schema
change (statuses are strings).

Revision ID: 0011_compensation
Revises: 0010_attempts
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0011_compensation"
down_revision: str | Sequence[str] | None = "0010_attempts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("stepwise_actions") as batch:
        batch.add_column(
            sa.Column("compensations_count", sa.Integer(), server_default=sa.text("0"), nullable=False)
        )
    op.create_table(
        "stepwise_compensations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("action_id", sa.BigInteger(), nullable=False),
        sa.Column("step_id", sa.BigInteger(), nullable=False),
        sa.Column("actor_type", sa.String(length=255), nullable=False),
        sa.Column("actor_id", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("arguments", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("sequence", sa.Integer(), nullable=True),
        sa.Column("ends_as", sa.String(length=20), nullable=True),
        sa.Column("compensation_step_id", sa.BigInteger(), nullable=True),
        sa.Column("invocation_id", sa.BigInteger(), nullable=True),
        sa.Column("error_class", sa.String(length=255), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("completed_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["action_id"],
            ["stepwise_actions.id"],
            name="fk_stepwise_compensations_action_id_stepwise_actions",
        ),
        sa.ForeignKeyConstraint(
            ["step_id"], ["stepwise_steps.id"], name="fk_stepwise_compensations_step_id_stepwise_steps"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_stepwise_compensations"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_stepwise_compensations_action", "stepwise_compensations", ["action_id", "id"])
    op.create_index("ix_stepwise_compensations_step", "stepwise_compensations", ["compensation_step_id"])
    op.create_index(
        "ix_stepwise_compensations_failed",
        "stepwise_compensations",
        ["action_id"],
        sqlite_where=sa.text("status = 'failed'"),
        postgresql_where=sa.text("status = 'failed'"),
    )


def downgrade() -> None:
    op.drop_index("ix_stepwise_compensations_failed", table_name="stepwise_compensations")
    op.drop_index("ix_stepwise_compensations_step", table_name="stepwise_compensations")
    op.drop_index("ix_stepwise_compensations_action", table_name="stepwise_compensations")
    op.drop_table("stepwise_compensations")
    with op.batch_alter_table("stepwise_actions") as batch:
        batch.drop_column("compensations_count")
