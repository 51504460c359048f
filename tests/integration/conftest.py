"""Integration tests bring their own PostgreSQL database, broker and workers, so the
suite's per-backend ``database`` fixture (SQLite and PostgreSQL) does not apply here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def database() -> Iterator[None]:
    """Overrides tests/conftest.py's fixture: run once, not once per backend."""
    yield
