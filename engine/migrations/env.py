"""Alembic environment for the engine's tables (``stepwise_*``)."""

from __future__ import annotations

from alembic import context

from engine import db, models  # noqa: F401 - the metadata must know every table
from engine.migrate import VERSION_TABLE

config = context.config
engine = config.attributes.get("engine") or db.get_engine()

with engine.connect() as connection:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:
        # Rebuilding a table that others reference (batch mode) needs foreign keys off, and
        # SQLite ignores the pragma inside a transaction: set it on the raw connection first.
        connection.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")  # type: ignore[union-attr]
    context.configure(
        connection=connection,
        target_metadata=db.Base.metadata,
        version_table=VERSION_TABLE,
        render_as_batch=sqlite,
    )
    with context.begin_transaction():
        context.run_migrations()
        if sqlite:
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
            if broken:
                raise RuntimeError(f"the migration left rows whose foreign keys are broken: {broken[:5]}")
    connection.commit()
    if sqlite:
        connection.connection.driver_connection.execute("PRAGMA foreign_keys=ON")  # type: ignore[union-attr]
