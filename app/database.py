"""The studio's database handle: Flask-SQLAlchemy's ``db``, on the same database as the engine.

The studio's own tables (``studio_users``, ``studio_webhook_deliveries``) live in
``db.Model``'s metadata and are made by the migrations (``engine/migrations``, 0008_studio),
like the engine's ``stepwise_*`` tables; the demo's actors' tables (``demo_*``) by
``stepwise serve --demo`` at its start. Nothing makes a table from a request.
"""

from __future__ import annotations

from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase


class Model(DeclarativeBase):
    """Declarative base of the studio's tables (``studio_*``, ``demo_*``)."""


db = SQLAlchemy(model_class=Model)
