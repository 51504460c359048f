"""Helpers of the tests that count what the engine sends: the statements SQLAlchemy runs on
the engine's database."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import event

from engine import db


@contextmanager
def statements() -> Iterator[list[str]]:
    """The text of each statement run on the engine's database inside the block, in order."""
    seen: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        seen.append(statement)

    sa_engine = db.get_engine()
    event.listen(sa_engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(sa_engine, "before_cursor_execute", count)
