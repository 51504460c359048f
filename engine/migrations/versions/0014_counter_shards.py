"""Counters spread over shards: ``stepwise_counters.shard``.

Every completing batch added to the same counter row and held its lock until it committed,
so two worker processes' batches took turns. A counter is now kept in up to
``engine.counter.SHARDS`` rows: each PostgreSQL session adds to the shard of its server
process (the column's default), and the metrics sum them. Existing rows become shard 0.

Revision ID: 0014
Revises: 0013_step_leases
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from engine.counter import ShardOfSession

# revision identifiers, used by Alembic.
revision: str = "0014_counter_shards"
down_revision: str | Sequence[str] | None = "0013_step_leases"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("stepwise_counters") as batch:
        batch.add_column(sa.Column("shard", sa.SmallInteger(), nullable=False, server_default="0"))
        batch.drop_constraint("pk_stepwise_counters", type_="primary")
        batch.create_primary_key("pk_stepwise_counters", ["name", "labels", "shard"])
        batch.alter_column("shard", server_default=ShardOfSession())


def downgrade() -> None:
    # Each counter back in one row, shard 0, holding the sum of its shards
    op.execute(
        "INSERT INTO stepwise_counters (name, labels, shard, value) SELECT DISTINCT name, labels, 0, 0"
        " FROM stepwise_counters AS other WHERE NOT EXISTS (SELECT 1 FROM stepwise_counters AS first"
        " WHERE first.name = other.name AND first.labels = other.labels AND first.shard = 0)"
    )
    op.execute(
        "UPDATE stepwise_counters SET value = (SELECT sum(value) FROM stepwise_counters AS every"
        " WHERE every.name = stepwise_counters.name AND every.labels = stepwise_counters.labels)"
        " WHERE shard = 0"
    )
    op.execute("DELETE FROM stepwise_counters WHERE shard <> 0")
    with op.batch_alter_table("stepwise_counters") as batch:
        batch.drop_constraint("pk_stepwise_counters", type_="primary")
        batch.create_primary_key("pk_stepwise_counters", ["name", "labels"])
        batch.drop_column("shard")
