"""The studio's database handle: Flask-SQLAlchemy's ``db``, on the same database as the engine.

The studio's own tables (its users, the demo's actors) live in ``db.Model``'s metadata and
are made by ``db.create_all()``; the engine's ``stepwise_*`` tables are the engine's own and
are made by its migrations (``engine.upgrade()``).
"""

from __future__ import annotations

from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase


class Model(DeclarativeBase):
    """Declarative base of the studio's tables (``studio_*``, ``demo_*``)."""


db = SQLAlchemy(model_class=Model)
