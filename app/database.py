"""The studio's database handle: Flask-SQLAlchemy's ``db``, on the same database as the engine.

The studio's own tables (``studio_users``, ``studio_webhook_deliveries``) live in
``db.Model``'s metadata and are made by the migrations (``engine/migrations``, 0008_studio),
like the engine's ``stepwise_*`` tables; the demo's actors' tables (``demo_*``) by
``stepwise serve --demo`` at its start. Nothing makes a table from a request.

On PostgreSQL every transaction of ``db.session`` plans its statements for the values they
run with (``plan_cache_mode = force_custom_plan``), however often they run. The connections
keep their prepared statements (``engine.pg_connection``: psycopg prepares a statement run
five times), and PostgreSQL gives a statement prepared five times more one generic plan,
made without its values, when that plan looks no dearer. The studio's filters are skewed (a
million succeeded actions beside a few thousand failed ones, a few hundred performing), and a
generic plan cannot tell them apart: at a million actions the overview's count of failed
trees became a scan of the whole table (174 ms instead of 23 ms) from its tenth request on.
Planning each run costs a fraction of a millisecond per statement (they are still parsed
once). ``SET LOCAL`` ends with the transaction: the engine's own sessions, the workers' and
the embedded worker's in ``stepwise serve`` included, keep PostgreSQL's default.
"""

from __future__ import annotations

from typing import Any

from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.orm import DeclarativeBase


class Model(DeclarativeBase):
    """Declarative base of the studio's tables (``studio_*``, ``demo_*``)."""


db = SQLAlchemy(model_class=Model)


@event.listens_for(db.session, "after_begin")
def _plan_for_values(_session: Any, _transaction: Any, connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql("SET LOCAL plan_cache_mode = force_custom_plan")
