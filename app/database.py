"""The studio's database handle: Flask-SQLAlchemy's ``db``, on the same database as the engine.

The studio's own tables (``studio_users``, ``studio_webhook_deliveries``) live in
``db.Model``'s metadata and are made by the migrations (``engine/migrations``, 0008_studio),
like the engine's ``stepwise_*`` tables; the demo's actors' tables (``demo_*``) by
``stepwise serve --demo`` at its start. Nothing makes a table from a request.
"""

from __future__ import annotations

from typing import Any

from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase


class Model(DeclarativeBase):
    """Declarative base of the studio's tables (``studio_*``, ``demo_*``)."""


db = SQLAlchemy(model_class=Model)


def plan_for_values(sa_engine: Engine) -> None:
    """On PostgreSQL, plan every statement of the studio's connections for the values it
    runs with (``plan_cache_mode = force_custom_plan``), however often it runs.

    The connections keep their prepared statements (``engine.pg_connection``: psycopg
    prepares a statement run five times), and PostgreSQL gives a statement prepared five
    times more one generic plan, made without its values, when that plan looks no dearer.
    The studio's filters are skewed (a million succeeded actions beside a few thousand
    failed ones, a few hundred performing), and a generic plan cannot tell them apart: at a
    million actions the overview's count of failed trees became a scan of the whole table
    (174 ms instead of 23 ms) from its tenth request on. Planning each run costs a fraction
    of a millisecond per statement; the statements are still parsed once. The workers'
    connections are the engine's own and keep PostgreSQL's default."""
    if sa_engine.dialect.name != "postgresql" or event.contains(sa_engine, "connect", _custom_plans):
        return
    event.listen(sa_engine, "connect", _custom_plans)


def _custom_plans(dbapi_connection: Any, _record: Any) -> None:
    # A session setting, outside any transaction: a later ROLLBACK does not undo it.
    autocommit = dbapi_connection.autocommit
    dbapi_connection.autocommit = True
    try:
        dbapi_connection.execute("SET plan_cache_mode = force_custom_plan")
    finally:
        dbapi_connection.autocommit = autocommit
