"""Initial schema: every ``stepwise_*`` table, index and constraint of ``engine/models.py``.

Written for SQLite and PostgreSQL alike: the primary keys are BIGINT on PostgreSQL and
INTEGER (the rowid) on SQLite, and the partial indexes carry both ``sqlite_where`` and
``postgresql_where``.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "stepwise_achievements",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("checksum_key", sa.String(length=255), nullable=False),
        sa.Column("checksum", sa.String(length=64), nullable=False),
        sa.Column("action_id", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stepwise_achievements")),
        sa.UniqueConstraint("checksum_key", name=op.f("uq_stepwise_achievements_checksum_key")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "stepwise_action_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("action_id", sa.BigInteger(), nullable=True),
        sa.Column("root_id", sa.BigInteger(), nullable=True),
        sa.Column("invocation_id", sa.BigInteger(), nullable=True),
        sa.Column("step_id", sa.BigInteger(), nullable=True),
        sa.Column("event", sa.String(length=40), nullable=False),
        sa.Column("cause", sa.String(length=20), nullable=False),
        sa.Column("by", sa.String(length=255), nullable=True),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stepwise_action_events")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_stepwise_action_events_action", "stepwise_action_events", ["action_id", "id"], unique=False
    )
    op.create_index(
        "ix_stepwise_action_events_event", "stepwise_action_events", ["event", "cause"], unique=False
    )
    op.create_index(
        "ix_stepwise_action_events_tree", "stepwise_action_events", ["root_id", "id"], unique=False
    )
    op.create_table(
        "stepwise_audit_entries",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("command", sa.String(length=40), nullable=False),
        sa.Column("cause", sa.String(length=20), nullable=False),
        sa.Column("by", sa.String(length=255), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("target", sa.String(length=500), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("result", sa.String(length=40), nullable=True),
        sa.Column("total", sa.Integer(), nullable=True),
        sa.Column("done", sa.Integer(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stepwise_audit_entries")),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_stepwise_audit_entries_at", "stepwise_audit_entries", ["at"], unique=False)
    # The studio's audit page: newest first, filtered by command or by user.
    op.create_index("ix_stepwise_audit_entries_by", "stepwise_audit_entries", ["by", "id"], unique=False)
    op.create_index(
        "ix_stepwise_audit_entries_command", "stepwise_audit_entries", ["command", "id"], unique=False
    )
    op.create_table(
        "stepwise_performances",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("concurrency_key", sa.String(length=255), nullable=True),
        sa.Column("action_id", sa.BigInteger(), nullable=False),
        sa.Column("outbound_complete_key", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stepwise_performances")),
        sa.UniqueConstraint("action_id", name=op.f("uq_stepwise_performances_action_id")),
        # One lane per key: two admissions creating it at once collide here.
        sa.UniqueConstraint("concurrency_key", name=op.f("uq_stepwise_performances_concurrency_key")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_stepwise_performances_outbound_complete_key",
        "stepwise_performances",
        ["outbound_complete_key"],
        unique=False,
        sqlite_where=sa.text("outbound_complete_key IS NOT NULL"),
        postgresql_where=sa.text("outbound_complete_key IS NOT NULL"),
    )
    op.create_table(
        "stepwise_actions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("actor_type", sa.String(length=255), nullable=False),
        sa.Column("actor_id", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("arguments", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("root", sa.Boolean(), nullable=False),
        sa.Column("root_id", sa.BigInteger(), nullable=True),
        sa.Column("outbound", sa.Boolean(), nullable=False),
        sa.Column("job", sa.String(length=255), nullable=True),
        sa.Column("concurrency_key", sa.String(length=255), nullable=False),
        sa.Column("checksum_key", sa.String(length=255), nullable=False),
        sa.Column("checksum", sa.String(length=64), nullable=True),
        sa.Column("current_step_index", sa.Integer(), nullable=False),
        sa.Column("timeout_seconds", sa.Integer(), nullable=True),
        sa.Column("deadline_at", sa.DateTime(), nullable=True),
        sa.Column("performance_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("superseded_by_id", sa.BigInteger(), nullable=True),
        sa.Column("after_callbacks_succeeded_count", sa.Integer(), nullable=True),
        sa.Column("after_callbacks_failed_count", sa.Integer(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error_class", sa.String(length=255), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("error_traceback", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("completed_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["performance_id"],
            ["stepwise_performances.id"],
            name=op.f("fk_stepwise_actions_performance_id_stepwise_performances"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stepwise_actions")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_stepwise_actions_actor", "stepwise_actions", ["actor_type", "actor_id", "name"], unique=False
    )
    op.create_index("ix_stepwise_actions_checksum_key", "stepwise_actions", ["checksum_key"], unique=False)
    op.create_index("ix_stepwise_actions_completed_at", "stepwise_actions", ["completed_at"], unique=False)
    op.create_index(
        "ix_stepwise_actions_concurrency_key", "stepwise_actions", ["concurrency_key", "id"], unique=False
    )
    op.create_index("ix_stepwise_actions_created_at", "stepwise_actions", ["created_at"], unique=False)
    op.create_index("ix_stepwise_actions_name", "stepwise_actions", ["name", "id"], unique=False)
    op.create_index(
        "ix_stepwise_actions_performance", "stepwise_actions", ["performance_id", "id"], unique=False
    )
    op.create_index("ix_stepwise_actions_roots", "stepwise_actions", ["root", "id"], unique=False)
    op.create_index("ix_stepwise_actions_started_at", "stepwise_actions", ["started_at"], unique=False)
    op.create_index("ix_stepwise_actions_status", "stepwise_actions", ["status", "id"], unique=False)
    op.create_index("ix_stepwise_actions_status_name", "stepwise_actions", ["status", "name"], unique=False)
    op.create_index("ix_stepwise_actions_tree", "stepwise_actions", ["root_id"], unique=False)
    # Invariant 1: at most one performing action per lane, whatever the workers do.
    op.create_index(
        "uq_stepwise_actions_one_performing_per_lane",
        "stepwise_actions",
        ["concurrency_key"],
        unique=True,
        sqlite_where=sa.text("status = 'performing'"),
        postgresql_where=sa.text("status = 'performing'"),
    )
    op.create_table(
        "stepwise_steps",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("action_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("definition_index", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("pending_actions_count", sa.Integer(), nullable=False),
        sa.Column("unsuccessful_actions_count", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("retry_at", sa.DateTime(), nullable=True),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("performed_at", sa.DateTime(), nullable=True),
        sa.Column("completed_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.CheckConstraint("pending_actions_count >= 0", name=op.f("ck_stepwise_steps_pending_not_negative")),
        sa.ForeignKeyConstraint(
            ["action_id"], ["stepwise_actions.id"], name=op.f("fk_stepwise_steps_action_id_stepwise_actions")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stepwise_steps")),
        # Each step of an action runs at most once: a redelivered message cannot open it twice.
        sa.UniqueConstraint(
            "action_id", "definition_index", name=op.f("uq_stepwise_steps_action_id_definition_index")
        ),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_stepwise_steps_action_id"), "stepwise_steps", ["action_id"], unique=False)
    op.create_index(
        "ix_stepwise_steps_unperformed",
        "stepwise_steps",
        ["created_at"],
        unique=False,
        sqlite_where=sa.text("performed_at IS NULL"),
        postgresql_where=sa.text("performed_at IS NULL"),
    )
    op.create_table(
        "stepwise_invocations",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("actor_type", sa.String(length=255), nullable=False),
        sa.Column("actor_id", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("arguments", sa.JSON(), nullable=False),
        sa.Column("parent_step_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("action_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("outcome", sa.String(length=20), nullable=True),
        sa.Column("error_class", sa.String(length=255), nullable=True),
        sa.Column("error_message", sa.String(length=2000), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("due_at", sa.DateTime(), nullable=True),
        sa.Column("settled_at", sa.DateTime(), nullable=True),
        sa.Column("concluded_at", sa.DateTime(), nullable=True),
        sa.Column("succeeded", sa.Boolean(), nullable=True),
        sa.Column("checksum_key", sa.String(length=255), nullable=True),
        sa.ForeignKeyConstraint(
            ["action_id"],
            ["stepwise_actions.id"],
            name=op.f("fk_stepwise_invocations_action_id_stepwise_actions"),
        ),
        sa.ForeignKeyConstraint(
            ["parent_step_id"],
            ["stepwise_steps.id"],
            name=op.f("fk_stepwise_invocations_parent_step_id_stepwise_steps"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stepwise_invocations")),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_stepwise_invocations_action", "stepwise_invocations", ["action_id"], unique=False)
    op.create_index(
        "ix_stepwise_invocations_parent_step", "stepwise_invocations", ["parent_step_id"], unique=False
    )
    # The studio: the recent invocations an achievement skipped, newest first.
    op.create_index(
        "ix_stepwise_invocations_skipped",
        "stepwise_invocations",
        ["checksum_key", "id"],
        unique=False,
        sqlite_where=sa.text("checksum_key IS NOT NULL"),
        postgresql_where=sa.text("checksum_key IS NOT NULL"),
    )
    # The sweeper's question: what was requested but never settled?
    op.create_index(
        "ix_stepwise_invocations_unsettled",
        "stepwise_invocations",
        ["created_at"],
        unique=False,
        sqlite_where=sa.text("settled_at IS NULL"),
        postgresql_where=sa.text("settled_at IS NULL"),
    )
    # A completing action finds the steps still waiting on it.
    op.create_index(
        "ix_stepwise_invocations_waiting",
        "stepwise_invocations",
        ["action_id"],
        unique=False,
        sqlite_where=sa.text("concluded_at IS NULL"),
        postgresql_where=sa.text("concluded_at IS NULL"),
    )
    op.create_table(
        "stepwise_step_actions",
        sa.Column("parent_step_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("child_action_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.ForeignKeyConstraint(
            ["child_action_id"],
            ["stepwise_actions.id"],
            name=op.f("fk_stepwise_step_actions_child_action_id_stepwise_actions"),
        ),
        sa.ForeignKeyConstraint(
            ["parent_step_id"],
            ["stepwise_steps.id"],
            name=op.f("fk_stepwise_step_actions_parent_step_id_stepwise_steps"),
        ),
        sa.PrimaryKeyConstraint("parent_step_id", "child_action_id", name=op.f("pk_stepwise_step_actions")),
    )
    op.create_index(
        "ix_stepwise_step_actions_child",
        "stepwise_step_actions",
        ["child_action_id", "parent_step_id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_stepwise_step_actions_child", table_name="stepwise_step_actions")
    op.drop_table("stepwise_step_actions")
    op.drop_index(
        "ix_stepwise_invocations_waiting",
        table_name="stepwise_invocations",
        sqlite_where=sa.text("concluded_at IS NULL"),
        postgresql_where=sa.text("concluded_at IS NULL"),
    )
    op.drop_index(
        "ix_stepwise_invocations_unsettled",
        table_name="stepwise_invocations",
        sqlite_where=sa.text("settled_at IS NULL"),
        postgresql_where=sa.text("settled_at IS NULL"),
    )
    op.drop_index(
        "ix_stepwise_invocations_skipped",
        table_name="stepwise_invocations",
        sqlite_where=sa.text("checksum_key IS NOT NULL"),
        postgresql_where=sa.text("checksum_key IS NOT NULL"),
    )
    op.drop_index("ix_stepwise_invocations_parent_step", table_name="stepwise_invocations")
    op.drop_index("ix_stepwise_invocations_action", table_name="stepwise_invocations")
    op.drop_table("stepwise_invocations")
    op.drop_index(
        "ix_stepwise_steps_unperformed",
        table_name="stepwise_steps",
        sqlite_where=sa.text("performed_at IS NULL"),
        postgresql_where=sa.text("performed_at IS NULL"),
    )
    op.drop_index(op.f("ix_stepwise_steps_action_id"), table_name="stepwise_steps")
    op.drop_table("stepwise_steps")
    op.drop_index(
        "uq_stepwise_actions_one_performing_per_lane",
        table_name="stepwise_actions",
        sqlite_where=sa.text("status = 'performing'"),
        postgresql_where=sa.text("status = 'performing'"),
    )
    op.drop_index("ix_stepwise_actions_tree", table_name="stepwise_actions")
    op.drop_index("ix_stepwise_actions_status_name", table_name="stepwise_actions")
    op.drop_index("ix_stepwise_actions_status", table_name="stepwise_actions")
    op.drop_index("ix_stepwise_actions_started_at", table_name="stepwise_actions")
    op.drop_index("ix_stepwise_actions_roots", table_name="stepwise_actions")
    op.drop_index("ix_stepwise_actions_performance", table_name="stepwise_actions")
    op.drop_index("ix_stepwise_actions_name", table_name="stepwise_actions")
    op.drop_index("ix_stepwise_actions_created_at", table_name="stepwise_actions")
    op.drop_index("ix_stepwise_actions_concurrency_key", table_name="stepwise_actions")
    op.drop_index("ix_stepwise_actions_completed_at", table_name="stepwise_actions")
    op.drop_index("ix_stepwise_actions_checksum_key", table_name="stepwise_actions")
    op.drop_index("ix_stepwise_actions_actor", table_name="stepwise_actions")
    op.drop_table("stepwise_actions")
    op.drop_index(
        "ix_stepwise_performances_outbound_complete_key",
        table_name="stepwise_performances",
        sqlite_where=sa.text("outbound_complete_key IS NOT NULL"),
        postgresql_where=sa.text("outbound_complete_key IS NOT NULL"),
    )
    op.drop_table("stepwise_performances")
    op.drop_index("ix_stepwise_audit_entries_command", table_name="stepwise_audit_entries")
    op.drop_index("ix_stepwise_audit_entries_by", table_name="stepwise_audit_entries")
    op.drop_index("ix_stepwise_audit_entries_at", table_name="stepwise_audit_entries")
    op.drop_table("stepwise_audit_entries")
    op.drop_index("ix_stepwise_action_events_tree", table_name="stepwise_action_events")
    op.drop_index("ix_stepwise_action_events_event", table_name="stepwise_action_events")
    op.drop_index("ix_stepwise_action_events_action", table_name="stepwise_action_events")
    op.drop_table("stepwise_action_events")
    op.drop_table("stepwise_achievements")
