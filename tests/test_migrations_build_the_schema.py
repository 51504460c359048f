"""Given an empty database, when the engine's migrations run (``engine.upgrade()`` or
``stepwise db upgrade``), then it holds exactly the tables, keys and indexes of the models.

Not a spec case: Stepped ships a Rails migration; these tests keep ours equal to the models
(``create_all``), partial indexes included, on SQLite and PostgreSQL. The autouse
``database`` fixture made its tables with ``create_all``, so each test migrates a second,
empty database on the same backend.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, func, insert, inspect, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

import engine
from engine import db, migrate
from engine.models import Action
from tests.conftest import POSTGRES_ADMIN_URL

STEPWISE = Path(sys.executable).with_name("stepwise")

PARTIAL_INDEXES = {
    "ix_stepwise_actions_lane",
    "uq_stepwise_actions_one_performing_per_lane",
    "ix_stepwise_actions_error_class",
    "ix_stepwise_actions_started_at",
    "ix_stepwise_actions_completed_at",
    "ix_stepwise_invocations_due_waits",
    "ix_stepwise_signals_inbox",
    "ix_stepwise_invocations_skipped",
    "ix_stepwise_invocations_unsettled",
    "ix_stepwise_invocations_waiting",
    "ix_stepwise_performances_outbound_complete_key",
    "ix_stepwise_schedules_due",
    "ix_stepwise_steps_unperformed",
    "ix_stepwise_compensations_failed",
    "ix_stepwise_attempts_open",
}


@pytest.fixture
def fresh_url(backend: Engine, tmp_path: Path) -> Iterator[str]:
    """The URL of a new, empty database on the test's backend, dropped afterwards."""
    if backend.dialect.name == "sqlite":
        yield f"sqlite:///{tmp_path / 'migrated.db'}"
        return
    name = f"stepwise_migrations_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5)
    admin.execute(f'CREATE DATABASE "{name}"')
    yield f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


@pytest.fixture
def fresh(fresh_url: str) -> Iterator[Engine]:
    sa_engine = create_engine(db.normalize_url(fresh_url))
    yield sa_engine
    sa_engine.dispose()


def not_the_studios(name: str | None, type_: str, parent_names: Any) -> bool:
    return not (type_ == "table" and (name or "").startswith("studio_"))


def differences(sa_engine: Engine) -> list[Any]:
    """What Alembic's autogenerate would change to make the database match the models (the
    studio's tables, which migration 0008_studio makes too, are compared with the studio's
    models in tests/studio/test_studio_tables_are_migrated.py)."""
    with sa_engine.connect() as connection:
        opts = {"version_table": migrate.VERSION_TABLE, "include_name": not_the_studios}
        context = MigrationContext.configure(connection, opts=opts)
        return list(compare_metadata(context, db.Base.metadata))


def schema(sa_engine: Engine) -> dict[str, dict[str, Any]]:
    """The engine's tables as the database describes them, including what ``compare_metadata``
    does not look at: index WHERE clauses, check constraints and ON DELETE rules."""
    inspector = inspect(sa_engine)

    def where(index: Any) -> str | None:
        options = index.get("dialect_options", {})
        clause = options.get("sqlite_where", options.get("postgresql_where"))
        return None if clause is None else str(clause)

    return {
        table: {
            "columns": [
                (c["name"], str(c["type"]), c["nullable"], c.get("default"))
                for c in inspector.get_columns(table)
            ],
            "primary_key": inspector.get_pk_constraint(table),
            "foreign_keys": sorted(
                (fk["name"], fk["constrained_columns"], fk["referred_table"], fk["options"])
                for fk in inspector.get_foreign_keys(table)
            ),
            "unique": sorted((u["name"], u["column_names"]) for u in inspector.get_unique_constraints(table)),
            "checks": sorted((c["name"], c["sqltext"]) for c in inspector.get_check_constraints(table)),
            "indexes": sorted(
                (i["name"], i["column_names"], i["unique"], where(i)) for i in inspector.get_indexes(table)
            ),
        }
        for table in sorted(db.Base.metadata.tables)
    }


def stepwise(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the ``stepwise`` console script, with ``DATABASE_URL`` only when given."""
    environment = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | env
    return subprocess.run(
        [str(STEPWISE), *args], capture_output=True, text=True, env=environment, timeout=120, check=False
    )


def test_migrations_build_the_same_schema_as_the_models(backend: Engine, fresh: Engine) -> None:
    # When
    engine.upgrade(fresh)

    # Then: nothing left for autogenerate, and the same tables as create_all down to the
    # partial indexes' WHERE clauses.
    assert differences(fresh) == []
    assert schema(fresh) == schema(backend)
    assert migrate.current(fresh) == migrate.head()


def test_the_partial_indexes_keep_their_conditions(fresh: Engine) -> None:
    # When
    engine.upgrade(fresh)

    # Then
    indexes = [index for table in schema(fresh).values() for index in table["indexes"]]
    assert {name for name, _columns, _unique, where in indexes if where} == PARTIAL_INDEXES
    assert ("uq_stepwise_actions_one_performing_per_lane", ["concurrency_key"], True) in [
        (name, columns, unique) for name, columns, unique, _where in indexes
    ]


def test_the_migrated_schema_lets_one_action_perform_per_lane(fresh: Engine) -> None:
    """DESIGN invariant 1, enforced by the migrated database itself."""
    # Given
    engine.upgrade(fresh)

    def action(status: str) -> dict[str, str]:
        return {
            "actor_type": "Car",
            "actor_id": "1",
            "name": "drive",
            "concurrency_key": "Car/1",
            "checksum_key": "Car/1/drive",
            "status": status,
        }

    # When: any number wait in the lane, and one performs
    with fresh.begin() as connection:
        connection.execute(insert(Action), [action("pending"), action("pending"), action("performing")])

    # Then: a second performing action in the same lane is refused
    with pytest.raises(IntegrityError), fresh.begin() as connection:
        connection.execute(insert(Action), [action("performing")])
    with fresh.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(Action)) == 3


def test_upgrading_again_changes_nothing(fresh: Engine) -> None:
    # Given
    engine.upgrade(fresh)
    before = schema(fresh)

    # When
    engine.upgrade(fresh)

    # Then
    assert schema(fresh) == before
    assert differences(fresh) == []
    with fresh.connect() as connection:
        versions = connection.execute(text(f"SELECT version_num FROM {migrate.VERSION_TABLE}")).scalars()
        assert list(versions) == [migrate.head()]


def test_an_upgrade_refuses_tables_made_by_create_all_until_they_are_stamped(fresh: Engine) -> None:
    # Given
    engine.create_all(fresh)

    # When / Then: no half-applied migration, but the remedy
    with pytest.raises(engine.ConfigurationError, match="stepwise db stamp head"):
        engine.upgrade(fresh)
    assert migrate.current(fresh) is None

    # When
    migrate.stamp(fresh)
    engine.upgrade(fresh)

    # Then
    assert migrate.current(fresh) == migrate.head()
    assert differences(fresh) == []


def test_downgrading_to_base_removes_every_table(fresh: Engine) -> None:
    # Given
    engine.upgrade(fresh)

    # When
    command.downgrade(migrate.alembic_config(fresh), "base")

    # Then
    assert migrate.tables_present(fresh) == []
    assert migrate.current(fresh) is None


def test_stepwise_db_upgrade_creates_the_tables_and_can_run_again(fresh_url: str, fresh: Engine) -> None:
    # When
    first = stepwise("db", "upgrade", "--database-url", fresh_url)
    second = stepwise("db", "upgrade", "--database-url", fresh_url)

    # Then
    assert (first.returncode, first.stderr) == (0, "")
    assert f"from an empty database to {migrate.head()} (head)" in first.stdout
    assert (second.returncode, second.stderr) == (0, "")
    assert f"is already at {migrate.head()} (head)" in second.stdout
    assert differences(fresh) == []


def test_stepwise_db_commands_read_DATABASE_URL(fresh_url: str, fresh: Engine) -> None:
    # When
    upgraded = stepwise("db", "upgrade", DATABASE_URL=fresh_url)
    current = stepwise("db", "current", DATABASE_URL=fresh_url)

    # Then
    assert upgraded.returncode == 0, upgraded.stderr
    assert (current.returncode, current.stdout) == (0, f"{migrate.head()} (head)\n")
    assert migrate.current(fresh) == migrate.head()


def test_stepwise_db_current_says_how_to_migrate_tables_made_by_create_all(
    fresh_url: str, fresh: Engine
) -> None:
    # Given
    engine.create_all(fresh)

    # When
    current = stepwise("db", "current", "--database-url", fresh_url)
    upgrade = stepwise("db", "upgrade", "--database-url", fresh_url)
    stamp = stepwise("db", "stamp", "head", "--database-url", fresh_url)
    after = stepwise("db", "current", "--database-url", fresh_url)

    # Then
    assert (current.returncode, current.stdout) == (
        0,
        "none (the tables were made by engine.create_all(): see `stepwise db stamp --help`)\n",
    )
    assert upgrade.returncode == 1
    assert upgrade.stderr.startswith("stepwise: error: The database already has the engine's tables")
    assert "`stepwise db stamp head`" in upgrade.stderr
    assert stamp.returncode == 0, stamp.stderr
    assert (after.returncode, after.stdout) == (0, f"{migrate.head()} (head)\n")


def test_stepwise_db_current_on_a_missing_database_fails_without_creating_it(
    backend: Engine, tmp_path: Path
) -> None:
    # Given
    if backend.dialect.name == "sqlite":
        missing = tmp_path / "missing.db"
        url, reason = f"sqlite:///{missing}", f"there is no database at {missing}"
    else:
        url = f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/stepwise_missing_{uuid.uuid4().hex[:6]}"
        reason = "does not exist"

    # When
    result = stepwise("db", "current", "--database-url", url)

    # Then
    assert result.returncode == 1
    assert result.stderr.startswith("stepwise: error: ")
    assert reason in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "missing.db").exists()


def test_stepwise_refuses_an_unsupported_database_without_showing_its_password() -> None:
    # When
    result = stepwise("db", "upgrade", "--database-url", "mysql://user:secret@localhost/cars")

    # Then
    assert result.returncode == 1
    assert result.stderr == (
        "stepwise: error: Stepwise runs on SQLite and PostgreSQL, but the URL from --database-url "
        "names a mysql database\n"
    )


def test_stepwise_without_a_command_prints_its_usage_and_exits_2() -> None:
    # When
    bare, group = stepwise(), stepwise("db")

    # Then
    assert bare.returncode == 2
    assert "Usage: stepwise" in bare.stderr  # click's wording
    assert group.returncode == 2
    assert "Usage: stepwise db" in group.stderr
