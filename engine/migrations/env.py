"""Alembic environment for the engine's tables (``stepwise_*``)."""

from __future__ import annotations

from alembic import context

from engine import db, models  # noqa: F401 - the metadata must know every table
from engine.migrate import VERSION_TABLE

config = context.config
engine = config.attributes.get("engine") or db.get_engine()

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=db.Base.metadata,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
