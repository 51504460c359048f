"""Given an empty database, when the migrations run, then the studio's own tables (its users,
the webhook's deliveries) are there exactly as the studio's models describe them; a database
whose studio tables were made by the old ``db.create_all()`` keeps its rows and gains the new
columns; and no request ever creates a table.

Not a spec case: issue 12, "the studio's own tables are created by Alembic migrations like
the engine's; nothing creates tables from a request path".
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table, create_engine, inspect, text
from sqlalchemy.engine import Engine

import engine
from app.database import db
from engine import migrate

ROOT = Path(__file__).resolve().parents[2]
#: The studio's tables a migration makes (the demo's are the demo's own, made at its start).
STUDIO_TABLES = ("studio_users", "studio_webhook_deliveries")


def studio_metadata() -> MetaData:
    import app.security.users
    import app.webhooks.deliveries  # noqa: F401 - registers the table

    metadata = MetaData()
    for name in STUDIO_TABLES:
        db.metadata.tables[name].to_metadata(metadata)
    return metadata


def differences(sa_engine: Engine) -> list[Any]:
    def studio_only(name: str | None, type_: str, parent_names: Any) -> bool:
        return type_ != "table" or name in STUDIO_TABLES

    with sa_engine.connect() as connection:
        opts = {"version_table": migrate.VERSION_TABLE, "include_name": studio_only}
        context = MigrationContext.configure(connection, opts=opts)
        return list(compare_metadata(context, studio_metadata()))


def test_the_migrations_make_the_studios_tables_as_its_models_describe_them(tmp_path: Path) -> None:
    fresh = create_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    try:
        engine.upgrade(fresh)
        assert set(STUDIO_TABLES) <= set(inspect(fresh).get_table_names())
        assert differences(fresh) == []
    finally:
        fresh.dispose()


def test_studio_tables_made_by_the_old_create_all_keep_their_rows_and_gain_the_new_columns(
    tmp_path: Path,
) -> None:
    # Given a database migrated to 0007 whose users table the studio made itself, with a user
    old = create_engine(f"sqlite:///{tmp_path / 'old.db'}")
    try:
        engine.upgrade(old, "0007")
        before = MetaData()
        Table(
            "studio_users",
            before,
            Column("id", Integer, primary_key=True),
            Column("name", String(80), unique=True, nullable=False),
            Column("password_hash", String(255), nullable=False),
            Column("role", String(20), nullable=False),
            Column("created_at", DateTime, nullable=False),
            Column("last_login_at", DateTime),
        )
        before.create_all(old)
        with old.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO studio_users (name, password_hash, role, created_at) "
                    "VALUES ('olga', 'x', 'operator', '2026-01-01 00:00:00')"
                )
            )

        # When
        engine.upgrade(old)

        # Then
        with old.connect() as connection:
            row = connection.execute(text("SELECT name, session_generation, disabled_at FROM studio_users"))
            assert list(row) == [("olga", 0, None)]
        assert differences(old) == []
    finally:
        old.dispose()


def test_no_request_path_creates_a_table() -> None:
    """Only the migrations (and the demo's start-up) make tables: no view, no helper a view
    calls. Read from the source, so a new ``create_all`` or ``.create(`` is caught in review."""
    offenders = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        if path.name in ("cli.py",):
            continue  # the commands: `serve --demo` makes the demo's tables at its start
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("create_all", "ensure_table"):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.keyword) and node.arg == "checkfirst":
                offenders.append(f"{path.relative_to(ROOT)}:{node.value.lineno}")
    assert offenders == []
