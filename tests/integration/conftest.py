"""Integration tests bring their own PostgreSQL database, broker and workers, so the
suite's per-backend ``database`` fixture (SQLite and PostgreSQL) does not apply here.
The shared fixtures come from ``brokers.py`` (every test runs once on Redis and once on
RabbitMQ) and ``deliveries.py``; each test module defines its ``database_url``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.brokers import broker_client, broker_server
from tests.integration.deliveries import sa_engine, workers

__all__ = ["broker_client", "broker_server", "sa_engine", "workers"]


@pytest.fixture(autouse=True)
def database() -> Iterator[None]:
    """Overrides tests/conftest.py's fixture: run once, not once per backend."""
    yield
