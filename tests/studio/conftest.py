"""Fixtures of the studio's tests: the app on the test's database (SQLite and PostgreSQL,
from tests/conftest.py), and clients signed in as an operator or a viewer.

    def test_something(operator_client: StudioClient, session: Session, car: Car) -> None:
        page = operator_client.get("/")                         # a signed-in page
        answer = operator_client.command("/actions/1/cancel")   # a POST with the CSRF token, as htmx
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from flask import Flask
from sqlalchemy import delete
from sqlalchemy.engine import Engine

import engine
from app import create_app
from app.database import db
from app.security import users
from tests.studio.support import PASSWORD, StudioClient

MakeUser = Callable[..., users.User]

TEST_CONFIG = {
    "TESTING": True,
    "SECRET_KEY": "test-secret-key",
    "STEPWISE_WEBHOOK_SECRET": "test-webhook-secret",
    "PASSWORD_HASH_METHOD": "pbkdf2:sha256:1000",  # fast: the tests sign in hundreds of times
}


@pytest.fixture
def app(database: Engine) -> Iterator[Flask]:
    """The studio on this test's database, with empty studio tables. The engine runs on the
    app's SQLAlchemy engine during the test, then on the test's own again."""
    studio = create_app({**TEST_CONFIG, "DATABASE_URL": database.url.render_as_string(hide_password=False)})
    studio.test_client_class = StudioClient
    with studio.app_context():
        db.create_all()
        for table in reversed(db.metadata.sorted_tables):
            db.session.execute(delete(table))
        db.session.commit()
    yield studio
    with studio.app_context():
        db.session.remove()
        db.engine.dispose()
    engine.configure(database)


@pytest.fixture
def make_user(app: Flask) -> MakeUser:
    """``make_user("ann", role="operator")``: a user whose password is support.PASSWORD."""

    def make(name: str, role: str = users.VIEWER, password: str = PASSWORD) -> users.User:
        with app.app_context():
            user = users.create(name, password, role)
            db.session.refresh(user)  # loaded, so its attributes read after expunge
            db.session.expunge(user)
            return user

    return make


@pytest.fixture
def client(app: Flask) -> StudioClient:
    """A browser that has not signed in."""
    return app.test_client()  # type: ignore[return-value]


@pytest.fixture
def operator_client(app: Flask, make_user: MakeUser) -> StudioClient:
    """Signed in as ``olga``, an operator."""
    make_user("olga", users.OPERATOR)
    signed_in: StudioClient = app.test_client()  # type: ignore[assignment]
    assert signed_in.login("olga").status_code == 302
    return signed_in


@pytest.fixture
def viewer_client(app: Flask, make_user: MakeUser) -> StudioClient:
    """Signed in as ``victor``, a viewer."""
    make_user("victor", users.VIEWER)
    signed_in: StudioClient = app.test_client()  # type: ignore[assignment]
    assert signed_in.login("victor").status_code == 302
    return signed_in
