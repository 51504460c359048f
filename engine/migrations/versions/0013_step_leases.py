"""Steps' committed leases: ``stepwise_steps.leased_until``.

A worker claims the steps it is about to run in its process's shared batch, instead of
holding each one's row lock in a transaction of its own while the body runs
(engine/claiming.py). The claim is a time: until then no other worker runs the step.
On PostgreSQL the table's pages keep a fifth free (``fillfactor`` 80), so that a claim,
which changes no indexed column, writes its row version on the same page and touches no
index (a HOT update). Pages written before keep their fill.

Revision ID: 0013
Revises: 0012_schedule_tick_invocation
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0013_step_leases"
down_revision: str | Sequence[str] | None = "0012_schedule_tick_invocation"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("stepwise_steps") as batch:
        batch.add_column(sa.Column("leased_until", sa.DateTime(), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE stepwise_steps SET (fillfactor = 80)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE stepwise_steps RESET (fillfactor)")
    with op.batch_alter_table("stepwise_steps") as batch:
        batch.drop_column("leased_until")
