"""Fewer index entries written per action.

Every action writes its row three times (queued, started, completed) and about six
history events, and a status change is never a HOT update: each row version goes into
every index of its table whose predicate it meets. Two indexes were read by nothing:
``stepwise_action_events (event, cause)`` (the metrics count retries and recoveries in
``stepwise_counters`` since 0006) and ``stepwise_actions (checksum_key)`` (achievements are
found in their own table). ``started_at`` and ``completed_at`` are read only by ranges (the
metrics' windows, the overview's charts), so their indexes now hold only the actions that
started or completed.

Revision ID: 0015
Revises: 0014_counter_shards
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0015_fewer_index_writes"
down_revision: str | Sequence[str] | None = "0014_counter_shards"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ACTIONS = "stepwise_actions"
_SET_ONCE = ("started_at", "completed_at")


def upgrade() -> None:
    op.drop_index("ix_stepwise_action_events_event", table_name="stepwise_action_events")
    op.drop_index("ix_stepwise_actions_checksum_key", table_name=_ACTIONS)
    for column in _SET_ONCE:
        op.drop_index(f"ix_stepwise_actions_{column}", table_name=_ACTIONS)
        where = sa.text(f"{column} IS NOT NULL")
        op.create_index(
            f"ix_stepwise_actions_{column}", _ACTIONS, [column], sqlite_where=where, postgresql_where=where
        )


def downgrade() -> None:
    for column in _SET_ONCE:
        op.drop_index(f"ix_stepwise_actions_{column}", table_name=_ACTIONS)
        op.create_index(f"ix_stepwise_actions_{column}", _ACTIONS, [column])
    op.create_index("ix_stepwise_actions_checksum_key", _ACTIONS, ["checksum_key"])
    op.create_index("ix_stepwise_action_events_event", "stepwise_action_events", ["event", "cause"])
