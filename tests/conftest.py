"""Test harness: every engine test runs on SQLite and on PostgreSQL (a fresh database per
run). Under CI=true a missing PostgreSQL fails the run instead of skipping."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import engine
from engine import db, registry, running, testing
from engine.models import Achievement, Action, Performance, Step
from tests.domain import AppBase, Car

CI = os.environ.get("CI") == "true"
POSTGRES_ADMIN_URL = os.environ.get("STEPWISE_TEST_POSTGRES", "postgresql://127.0.0.1:5432/postgres")
BACKENDS = os.environ.get("STEPWISE_TEST_BACKENDS", "sqlite,postgresql").split(",")


def unavailable(reason: str) -> None:
    if CI:
        pytest.fail(f"{reason} (CI=true: a skip would hide untested code)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test run, dropped at the end."""
    name = f"stepwise_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        admin = psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        unavailable(f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL}: {error}")
    admin.execute(f'CREATE DATABASE "{name}"')
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_url")
        sa_engine = engine.configure(url, pool_size=10)
    else:
        path = Path(tmp_path_factory.mktemp("sqlite")) / "stepwise.db"
        sa_engine = engine.configure(f"sqlite:///{path}")
    engine.create_all(sa_engine)
    AppBase.metadata.create_all(sa_engine)
    yield sa_engine
    sa_engine.dispose()


def truncate(sa_engine: Engine) -> None:
    tables = [t.name for t in reversed(db.Base.metadata.sorted_tables)] + [
        t.name for t in reversed(AppBase.metadata.sorted_tables)
    ]
    with sa_engine.begin() as connection:
        if sa_engine.dialect.name == "postgresql":
            connection.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
        else:
            for table in tables:
                connection.execute(text(f"DELETE FROM {table}"))
            connection.execute(text("DELETE FROM sqlite_sequence"))


@pytest.fixture(autouse=True)
def database(backend: Engine) -> Iterator[Engine]:
    """Point the engine at this backend, with empty tables, a fresh stub broker, a real
    clock, no handled exceptions and the registry as the test found it."""
    engine.configure(backend)
    truncate(backend)
    testing.setup()
    saved = registry.snapshot()
    yield backend
    registry.restore(saved)
    testing.setup()


@pytest.fixture(autouse=True)
def claims_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``STEPWISE_TEST_CLAIMS=always``, every body is claimed in a batch
    (engine/claiming.py), as under load, not only while batches are being written: the
    suite run so checks the claimed path as it checks the one-at-a-time path."""
    if os.environ.get("STEPWISE_TEST_CLAIMS") == "always":
        monkeypatch.setattr(running, "claims", lambda: True)


@pytest.fixture
def session(database: Engine) -> Iterator[Session]:
    with engine.new_session() as s:
        yield s


@pytest.fixture
def car(session: Session) -> Car:
    new = Car()
    session.add(new)
    session.commit()
    return new


class Counts:
    """Row counts of the four tables Stepped's tests count, and their changes."""

    MODELS: dict[str, Any] = {
        "actions": Action,
        "steps": Step,
        "performances": Performance,
        "achievements": Achievement,
    }

    def __init__(self, session: Session) -> None:
        self.session = session
        self.before = self.now()

    def now(self) -> dict[str, int]:
        with engine.new_session() as fresh:
            return {
                name: fresh.scalar(select(func.count()).select_from(model)) or 0
                for name, model in self.MODELS.items()
            }

    def delta(self) -> dict[str, int]:
        """Changes since the last call (or since creation), then start counting afresh."""
        current = self.now()
        changes = {name: current[name] - self.before[name] for name in current}
        self.before = current
        return changes


@pytest.fixture
def counts(session: Session) -> Counts:
    return Counts(session)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "postgresql_only: runs on the PostgreSQL backend only (row locks, real concurrency)"
    )
    config.addinivalue_line("markers", "sqlite_only: runs on the SQLite backend only (its single writer)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the SQLite variant of PostgreSQL-only tests, and the PostgreSQL variant of
    SQLite-only ones: they are not skipped, they do not exist there (a skip under CI would
    count as a failure)."""
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("backend") if callspec is not None else None
        elsewhere = (backend == "sqlite" and item.get_closest_marker("postgresql_only")) or (
            backend == "postgresql" and item.get_closest_marker("sqlite_only")
        )
        (drop if elsewhere else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
