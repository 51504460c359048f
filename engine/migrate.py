"""Migrations: the Alembic scripts shipped in ``engine/migrations``, applied by one call
(``engine.upgrade()``) or one command (``stepwise db upgrade``)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import Engine

from . import db

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(engine: Engine | None = None) -> object:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["engine"] = engine or db.get_engine()
    return config


def upgrade(engine: Engine | None = None, revision: str = "head") -> None:
    """Bring the engine's tables up to ``revision`` (default: the newest)."""
    from alembic import command

    command.upgrade(alembic_config(engine), revision)  # type: ignore[arg-type]


def create_all(engine: Engine | None = None) -> None:
    """Create the engine's tables directly from the models (tests, scratch databases)."""
    from . import models  # noqa: F401 - registers every table

    db.Base.metadata.create_all(engine or db.get_engine())
