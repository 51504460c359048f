"""Lane membership follows from the key (issue 9): ``stepwise_actions.performance_id`` goes.

An action is in the lane of its ``concurrency_key`` while it is pending or performing; the
column that repeated this had to be written on every admission, superseding and completion
(and kept an index and a foreign key checked on each of those writes). A partial index on
the key, over incomplete actions only, finds a lane's live members instead: a lane that
never drains is not slowed by the work its key completed or superseded.

On SQLite the column is dropped by rebuilding the table (it is in a foreign key, which
``ALTER TABLE … DROP COLUMN`` refuses); the environment turns foreign keys off while
migrations run, as SQLite's documentation prescribes for rebuilding a table.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIVE = "status IN ('pending', 'performing')"


def upgrade() -> None:
    op.create_index(
        "ix_stepwise_actions_lane",
        "stepwise_actions",
        ["concurrency_key", "id"],
        sqlite_where=sa.text(LIVE),
        postgresql_where=sa.text(LIVE),
    )
    op.drop_index("ix_stepwise_actions_performance", table_name="stepwise_actions")
    with op.batch_alter_table("stepwise_actions") as batch:
        batch.drop_column("performance_id")


def downgrade() -> None:
    with op.batch_alter_table("stepwise_actions") as batch:
        batch.add_column(sa.Column("performance_id", sa.BigInteger(), nullable=True))
        batch.create_foreign_key(
            "fk_stepwise_actions_performance_id_stepwise_performances",
            "stepwise_performances",
            ["performance_id"],
            ["id"],
            ondelete="SET NULL",
        )
    op.execute(
        "UPDATE stepwise_actions SET performance_id = (SELECT p.id FROM stepwise_performances p "
        f"WHERE p.concurrency_key = stepwise_actions.concurrency_key) WHERE {LIVE}"
    )
    op.create_index("ix_stepwise_actions_performance", "stepwise_actions", ["performance_id", "id"])
    op.drop_index("ix_stepwise_actions_lane", table_name="stepwise_actions")
