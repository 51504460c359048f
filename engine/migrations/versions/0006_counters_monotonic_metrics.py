"""Monotonic counters for the metrics (issue 12): ``stepwise_counters``.

Retries and sweeper recoveries were counted from the history, so pruning it made
``stepwise_retries_total`` and ``stepwise_sweeper_recoveries_total`` drop. They are now
added to as the events are written (``engine.counter``); existing databases start them at
0, which Prometheus reads as a counter reset.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "stepwise_counters",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("labels", sa.String(length=500), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", "labels", name=op.f("pk_stepwise_counters")),
    )


def downgrade() -> None:
    op.drop_table("stepwise_counters")
