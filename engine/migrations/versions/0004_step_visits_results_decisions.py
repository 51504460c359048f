"""Results and decisions (issue 10): what a step body returned, what it decided, and
which visit of its step it was.

- ``stepwise_steps.result``: the body's return value (JSON in the form of
  ``engine.arguments``); the last step's becomes the action's ``result``.
- ``stepwise_steps.decision``: ``{"go_to": name}``, ``{"finish": true}`` or
  ``{"fail": reason}``; NULL means the next step.
- ``stepwise_steps.visit``: a decision may go back to a step (a loop), so an action can
  run the same step more than once; each visit is its own row, and the unique key that
  keeps a redelivered message from opening a step twice becomes (action, step, visit).
  Existing rows are the first visit.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD = "uq_stepwise_steps_action_id_definition_index"
NEW = "uq_stepwise_steps_action_id_definition_index_visit"


def upgrade() -> None:
    with op.batch_alter_table("stepwise_steps") as batch:
        batch.add_column(sa.Column("visit", sa.Integer(), server_default=sa.text("1"), nullable=False))
        batch.add_column(sa.Column("result", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("decision", sa.JSON(), nullable=True))
        batch.drop_constraint(OLD, type_="unique")
        batch.create_unique_constraint(NEW, ["action_id", "definition_index", "visit"])


def downgrade() -> None:
    # Later visits of a step cannot be kept under the old key: only the first stays, and
    # what pointed at a later visit forgets it.
    later = "(SELECT id FROM stepwise_steps WHERE visit > 1)"
    op.execute(f"DELETE FROM stepwise_step_actions WHERE parent_step_id IN {later}")
    op.execute(f"UPDATE stepwise_invocations SET parent_step_id = NULL WHERE parent_step_id IN {later}")
    op.execute(f"UPDATE stepwise_action_events SET step_id = NULL WHERE step_id IN {later}")
    op.execute("DELETE FROM stepwise_steps WHERE visit > 1")
    with op.batch_alter_table("stepwise_steps") as batch:
        batch.drop_constraint(NEW, type_="unique")
        batch.create_unique_constraint(OLD, ["action_id", "definition_index"])
        batch.drop_column("decision")
        batch.drop_column("result")
        batch.drop_column("visit")
