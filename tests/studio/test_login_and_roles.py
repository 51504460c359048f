"""Given the studio, people sign in with a name and a hashed password; a viewer sees every
page and changes nothing; an operator may also run commands. Users come from the
``stepwise users`` command.

Not a spec case: the studio is ours (issue 4, "Access"). A probe blueprint stands for the
command views the pages add: a POST marked ``@requires("operator")`` that cancels an action
through ``engine.commands``.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
from flask import Blueprint, Flask, request
from sqlalchemy import func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session
from werkzeug.wrappers import Response

import engine
from app import create_app
from app.database import db
from app.security import users
from app.security.auth import current_user, requires
from app.views import command_response
from engine import cli
from engine.errors import ConfigurationError
from engine.models import Action, AuditEntry
from tests.domain import Car
from tests.studio.conftest import TEST_CONFIG, MakeUser
from tests.studio.support import HTMX, PASSWORD, StudioClient

probe = Blueprint("probe", __name__, url_prefix="/probe")


def order_paint(car: Car, *colors: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


@probe.post("/actions/<int:action_id>/cancel")
@requires(users.OPERATOR)
def cancel(action_id: int) -> Response:
    user = current_user()
    assert user is not None
    result = engine.commands.cancel(action_id, by=user.name, reason=request.form.get("reason"))
    return command_response(f"Action {action_id}: {result.reason}", ok=bool(result))


@pytest.fixture(autouse=True)
def with_probe(app: Flask) -> None:
    app.register_blueprint(probe)


@pytest.fixture
def painting(session: Session, car: Car) -> Action:
    """An outbound action, performing until someone completes or cancels it."""
    engine.define(Car, "paint", order_paint, outbound=True)
    action = engine.now(car, "paint")
    assert action.status == "performing"
    return action


def status_of(session: Session, action_id: int) -> str:
    session.expire_all()
    action = session.get(Action, action_id)
    assert action is not None
    return action.status


def audit_count(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(AuditEntry)) or 0


# --- signing in -------------------------------------------------------------------------------


def test_a_visitor_who_has_not_signed_in_is_sent_to_the_sign_in_page(client: StudioClient) -> None:
    # When a visitor opens the overview without signing in
    page = client.get("/")

    # Then they are sent to the sign-in page, which brings them back afterwards
    assert page.status_code == 302
    assert page.headers["Location"] == "/login?next=/"
    assert "Sign in to Stepwise" in client.get("/login").text


def test_htmx_and_json_clients_that_have_not_signed_in_are_told_so_in_their_own_terms(
    client: StudioClient,
) -> None:
    # htmx follows HX-Redirect with a full page load
    fragment = client.get("/overview/counts", headers=HTMX)
    assert fragment.status_code == 204
    assert fragment.headers["HX-Redirect"].startswith("/login")

    # a JSON client gets 401 JSON
    api = client.get("/", headers={"Accept": "application/json"})
    assert api.status_code == 401
    assert api.json == {"error": "not signed in", "login": "/login"}


def test_signing_in_shows_the_user_and_their_role_and_returns_to_the_page_asked_for(
    client: StudioClient, make_user: MakeUser
) -> None:
    # Given an operator
    make_user("olga", users.OPERATOR)

    # When she signs in from a link to the audit page
    answer = client.login("olga", next="/audit/")

    # Then she lands there, and every page names her and her role
    assert answer.status_code == 302
    assert answer.headers["Location"] == "/audit/"
    page = client.get("/").text
    assert "olga" in page
    assert '<span class="badge role role-operator"' in page


def test_a_wrong_password_and_an_unknown_name_get_the_same_answer(
    client: StudioClient, make_user: MakeUser
) -> None:
    make_user("olga", users.OPERATOR)

    wrong_password = client.login("olga", "not her password")
    unknown_name = client.login("nobody", PASSWORD)

    for answer in (wrong_password, unknown_name):
        assert answer.status_code == 401
        assert "Unknown name or wrong password." in answer.text
    assert client.get("/").status_code == 302  # still signed out


def test_signing_in_never_redirects_to_another_site(client: StudioClient, make_user: MakeUser) -> None:
    make_user("olga", users.OPERATOR)
    for target in ("https://evil.example/", "//evil.example/", "javascript:alert(1)"):
        answer = client.login("olga", next=target)
        assert answer.headers["Location"] == "/"


def test_signing_in_starts_a_new_session_with_a_new_csrf_token(
    client: StudioClient, make_user: MakeUser
) -> None:
    # Given a visitor whose session already has a token (and whatever else)
    make_user("olga", users.OPERATOR)
    client.get("/login")
    with client.session_transaction() as before:
        before["planted"] = "by someone else"
    token_before = client.csrf_token()

    # When they sign in
    client.login("olga")

    # Then the session was replaced, token included
    with client.session_transaction() as after:
        assert "planted" not in after
        assert isinstance(after["user_id"], int)
    assert client.csrf_token() != token_before


def test_signing_out_ends_the_session(operator_client: StudioClient) -> None:
    answer = operator_client.command("/logout", htmx=False)
    assert answer.status_code == 302
    assert answer.headers["Location"] == "/login"
    assert operator_client.get("/").status_code == 302


def test_a_deleted_user_is_signed_out_at_the_next_request(app: Flask, operator_client: StudioClient) -> None:
    with app.app_context():
        db.session.delete(users.find("olga"))
        db.session.commit()
    assert operator_client.get("/").status_code == 302


def test_passwords_are_stored_hashed(app: Flask, make_user: MakeUser) -> None:
    make_user("olga", users.OPERATOR)
    with app.app_context():
        user = users.find("olga")
        assert user is not None
        assert PASSWORD not in user.password_hash
        assert user.password_hash.startswith(("scrypt:", "pbkdf2:"))
        assert user.check_password(PASSWORD)


# --- roles ---------------------------------------------------------------------------------------


def test_a_viewer_sees_every_page(viewer_client: StudioClient) -> None:
    for path in ("/", "/actions/", "/lanes/", "/achievements/", "/catalog/", "/audit/"):
        page = viewer_client.get(path)
        assert page.status_code == 200, path
        assert "victor" in page.text


def test_a_viewer_trying_a_command_is_refused_with_a_page_and_nothing_changes(
    viewer_client: StudioClient, session: Session, painting: Action
) -> None:
    # When a viewer sends the cancel form (with a good CSRF token) without htmx
    answer = viewer_client.command(f"/probe/actions/{painting.id}/cancel", htmx=False)

    # Then a 403 page says why and what to do, and the action still performs, unaudited
    assert answer.status_code == 403
    assert "You are signed in as victor (viewer). Only an operator may do this" in answer.text
    assert "stepwise users role victor operator" in answer.text
    assert status_of(session, painting.id) == "performing"
    assert audit_count(session) == 0


def test_a_viewer_trying_a_command_through_htmx_gets_a_message_in_the_message_area(
    viewer_client: StudioClient, session: Session, painting: Action
) -> None:
    answer = viewer_client.command(f"/probe/actions/{painting.id}/cancel")

    assert answer.status_code == 403
    assert answer.headers["HX-Retarget"] == "#flash"
    assert answer.headers["HX-Reswap"] == "innerHTML"
    assert 'class="flash flash-error" role="alert"' in answer.text
    assert "<html" not in answer.text
    assert status_of(session, painting.id) == "performing"


def test_an_operator_runs_the_command_and_it_is_audited_with_her_name(
    operator_client: StudioClient, session: Session, painting: Action
) -> None:
    # When an operator cancels the action through htmx
    answer = operator_client.command(f"/probe/actions/{painting.id}/cancel", {"reason": "wrong colour"})

    # Then it is cancelled, the audit names her, and the message is swapped in out of band
    assert answer.status_code == 200
    assert f"Action {painting.id}: cancelled" in answer.text
    assert 'hx-swap-oob="innerHTML"' in answer.text
    assert status_of(session, painting.id) == "cancelled"
    entry = session.scalars(select(AuditEntry)).one()
    assert (entry.command, entry.by, entry.reason) == ("cancel", "olga", "wrong colour")

    # And a second time changes nothing and says so (409)
    again = operator_client.command(f"/probe/actions/{painting.id}/cancel")
    assert again.status_code == 409
    assert "already_completed" in again.text


def test_without_javascript_a_command_redirects_back_with_a_flashed_message(
    operator_client: StudioClient, session: Session, painting: Action
) -> None:
    answer = operator_client.command(
        f"/probe/actions/{painting.id}/cancel", htmx=False, headers={"Referer": "/lanes/"}
    )
    assert answer.status_code == 303
    assert answer.headers["Location"] == "/lanes/"
    assert f"Action {painting.id}: cancelled" in operator_client.get("/lanes/").text


# --- the users command ---------------------------------------------------------------------------

Stepwise = Callable[..., int]


@pytest.fixture
def stepwise(app: Flask, database: Engine, monkeypatch: pytest.MonkeyPatch) -> Stepwise:
    """``stepwise ARGS --database-url <the test's database>``, in this process, with
    ``stdin`` as standard input; the engine is pointed back at the test's database after."""

    def run(*args: str, stdin: str = "") -> int:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        try:
            return cli.main([*args, "--database-url", database.url.render_as_string(hide_password=False)])
        finally:
            engine.configure(database)

    return run


def test_users_are_created_listed_changed_and_deleted_on_the_command_line(
    stepwise: Stepwise, client: StudioClient, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an operator created on the command line, with the password on standard input
    assert (
        stepwise("users", "create", "ann", "--role", "operator", "--password-stdin", stdin=PASSWORD + "\n")
        == 0
    )
    assert "Created operator ann" in capsys.readouterr().out

    # Then she can sign in, and she is listed
    assert client.login("ann").status_code == 302
    assert stepwise("users", "list") == 0
    assert capsys.readouterr().out.split()[:4] == ["ann", "operator", "last", "sign-in:"]

    # When she is made a viewer and given a new password
    assert stepwise("users", "role", "ann", "viewer") == 0
    assert stepwise("users", "password", "ann", "--password-stdin", stdin="a brand new password\n") == 0
    capsys.readouterr()

    # Then only the new password works
    assert client.login("ann").status_code == 401
    assert client.login("ann", "a brand new password").status_code == 302

    # When she is deleted, she is gone
    assert stepwise("users", "delete", "ann") == 0
    assert stepwise("users", "list") == 0
    assert "no users yet" in capsys.readouterr().out


def test_the_users_command_says_what_is_wrong(stepwise: Stepwise, capsys: pytest.CaptureFixture[str]) -> None:
    assert stepwise("users", "create", "ann", "--password-stdin", stdin="short\n") == 1
    assert "the password is too short: use at least 8 characters" in capsys.readouterr().err

    assert stepwise("users", "create", "ann", "--password-stdin", stdin=PASSWORD + "\n") == 0
    assert stepwise("users", "create", "ann", "--password-stdin", stdin=PASSWORD + "\n") == 1
    assert "there is already a user named 'ann'" in capsys.readouterr().err

    assert stepwise("users", "create", "ann smith", "--password-stdin", stdin=PASSWORD + "\n") == 1
    assert "'ann smith' is not a valid user name" in capsys.readouterr().err

    assert stepwise("users", "delete", "bob") == 1
    assert "there is no user named 'bob'" in capsys.readouterr().err

    # No terminal and no --password-stdin: it cannot ask
    assert stepwise("users", "create", "bob") == 1
    assert "--password-stdin" in capsys.readouterr().err

    with pytest.raises(SystemExit) as usage:
        stepwise("users", "create", "bob", "--role", "boss")
    assert usage.value.code == 2


# --- configuration ---------------------------------------------------------------------------------


def test_outside_development_the_studio_needs_a_secret_key(
    database: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.delenv("STEPWISE_ENV", raising=False)
    url = database.url.render_as_string(hide_password=False)
    try:
        with pytest.raises(ConfigurationError, match="SECRET_KEY is not set: the studio signs its session"):
            create_app({"DATABASE_URL": url})

        # Development runs with a throwaway key
        development = create_app({"DATABASE_URL": url, "STEPWISE_ENV": "development"})
        assert len(development.config["SECRET_KEY"]) == 64
        assert development.config["SESSION_COOKIE_SECURE"] is False
    finally:
        engine.configure(database)


def test_in_production_the_session_cookie_is_secure(
    database: Engine, make_user: MakeUser, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the studio configured from the environment, in production
    monkeypatch.setenv("SECRET_KEY", "a production secret")
    monkeypatch.setenv("STEPWISE_ENV", "production")
    monkeypatch.setenv("DATABASE_URL", database.url.render_as_string(hide_password=False))
    try:
        production = create_app()
        assert production.config["SECRET_KEY"] == "a production secret"
        make_user("olga", users.OPERATOR)

        # When someone signs in (over HTTPS)
        browser = production.test_client()
        browser.get("/login", base_url="https://studio.example")
        with browser.session_transaction(base_url="https://studio.example") as s:
            token = s["_csrf_token"]
        answer = browser.post(
            "/login",
            base_url="https://studio.example",
            data={"name": "olga", "password": PASSWORD, "csrf_token": token},
        )

        # Then the session cookie is Secure, HttpOnly and SameSite=Lax
        cookie = answer.headers["Set-Cookie"]
        assert cookie.startswith("stepwise_session=")
        for flag in ("Secure", "HttpOnly", "SameSite=Lax"):
            assert flag in cookie
    finally:
        engine.configure(database)


def test_the_test_configuration_wins_over_the_environment(
    database: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_KEY", "from the environment")
    monkeypatch.setenv("STEPWISE_WEBHOOK_SECRET", "webhook secret from the environment")
    try:
        studio = create_app(
            {**TEST_CONFIG, "DATABASE_URL": database.url.render_as_string(hide_password=False)}
        )
        assert studio.config["SECRET_KEY"] == TEST_CONFIG["SECRET_KEY"]
        assert studio.config["STEPWISE_WEBHOOK_SECRET"] == TEST_CONFIG["STEPWISE_WEBHOOK_SECRET"]
        assert studio.config["SESSION_COOKIE_SECURE"] is False
    finally:
        engine.configure(database)
