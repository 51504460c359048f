"""Integration tests bring their own PostgreSQL database, broker and workers, so the
suite's per-backend ``database`` fixture (SQLite and PostgreSQL) does not apply here.
The shared fixtures come from ``harness.py`` and ``deliveries.py``; each test module
defines its ``database_url``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.deliveries import sa_engine, workers
from tests.integration.harness import redis_broker, redis_url

__all__ = ["redis_broker", "redis_url", "sa_engine", "workers"]


@pytest.fixture(autouse=True)
def database() -> Iterator[None]:
    """Overrides tests/conftest.py's fixture: run once, not once per backend."""
    yield
