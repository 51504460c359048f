"""Migrations: the Alembic scripts shipped in ``engine/migrations``, applied by one call
(``engine.upgrade()``) or one command (``stepwise db upgrade``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect
from sqlalchemy.engine import Engine

from . import db
from .errors import ConfigurationError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
#: Alembic's bookkeeping table, named after the engine so it never collides with the
#: host application's own ``alembic_version``.
VERSION_TABLE = "stepwise_alembic_version"


def alembic_config(engine: Engine | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["engine"] = engine or db.get_engine()
    return config


def upgrade(engine: Engine | None = None, revision: str = "head") -> None:
    """Bring the engine's tables up to ``revision`` (default: the newest)."""
    from alembic import command

    engine = engine or db.get_engine()
    if current(engine) is None and (existing := tables_present(engine)):
        # Without this check Alembic would fail half-way with "table already exists".
        raise ConfigurationError(
            f"The database already has the engine's tables ({', '.join(existing)}) but no "
            f"{VERSION_TABLE} table: they were made by engine.create_all(), not by migrations. "
            "If they match this version of Stepwise, record that with `stepwise db stamp head` "
            "(engine.migrate.stamp()); otherwise drop them and upgrade again."
        )
    command.upgrade(alembic_config(engine), revision)


def stamp(engine: Engine | None = None, revision: str = "head") -> None:
    """Record that the database is at ``revision`` without running any migration (for
    tables made by ``create_all()``)."""
    from alembic import command

    command.stamp(alembic_config(engine), revision)


def current(engine: Engine | None = None) -> str | None:
    """The revision the database is at; None when no migration was ever applied."""
    from alembic.runtime.migration import MigrationContext

    with (engine or db.get_engine()).connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()


def head() -> str | None:
    """The newest revision shipped with this version of the engine."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def tables_present(engine: Engine) -> list[str]:
    """The engine's tables present in the database, sorted by name."""
    from . import models  # noqa: F401 - registers every table

    present = set(inspect(engine).get_table_names())
    return sorted(present & set(db.Base.metadata.tables))


def create_all(engine: Engine | None = None) -> None:
    """Create the engine's tables directly from the models (tests, scratch databases)."""
    from . import models  # noqa: F401 - registers every table

    db.Base.metadata.create_all(engine or db.get_engine())
