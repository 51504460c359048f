"""Each SQLite engine the engine is configured with gets its connection settings (foreign
keys on, WAL, the write lock taken up front), even one made after another was dropped:
CPython may give the new engine the dropped one's ``id()``, which once made the new one
look prepared already (a CI run's ``PRAGMA foreign_keys`` read 0)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from engine import sqlite_connection

pytestmark = pytest.mark.sqlite_only


def test_every_sqlite_engine_gets_its_pragmas_even_after_another_was_dropped(tmp_path: Path) -> None:
    # Given engines made, prepared and dropped one after the other (ids get reused)
    seen_ids: set[int] = set()
    foreign_keys: list[int] = []
    for n in range(20):
        sa_engine = create_engine(f"sqlite:///{tmp_path / f'{n}.db'}")
        seen_ids.add(id(sa_engine))
        # When each is prepared as the engine prepares its SQLite engines
        sqlite_connection.prepare(sa_engine)
        with sa_engine.connect() as connection:
            foreign_keys.append(connection.execute(text("PRAGMA foreign_keys")).scalar_one())
        sa_engine.dispose()
        del sa_engine
        gc.collect()

    # Then every one of them enforces foreign keys
    assert foreign_keys == [1] * 20, f"{len(seen_ids)} distinct ids among 20 engines"
