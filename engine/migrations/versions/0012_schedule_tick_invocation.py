"""Schedule ticks by invocation: ``ix_stepwise_schedule_ticks_invocation``.

An action's page says which schedule and tick started it: the tick is found by the
invocation that started the action, which no index reached before (the ticks were read by
schedule only).

Revision ID: 0012
Revises: 0011_compensation
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0012_schedule_tick_invocation"
down_revision: str | Sequence[str] | None = "0011_compensation"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_stepwise_schedule_ticks_invocation", "stepwise_schedule_ticks", ["invocation_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_stepwise_schedule_ticks_invocation", table_name="stepwise_schedule_ticks")
