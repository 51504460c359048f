"""Given an admin, the People page creates users, changes their roles and disables them,
each change audited with the admin's name; below admin the page is refused. Signing out, a
new password or being disabled ends the user's other sessions.

Not a spec case: issue 12, item 9 ("People") and "session revocation".
"""

from __future__ import annotations

from flask import Flask
from sqlalchemy import select

from app.database import db
from app.security import users
from engine.models import AuditEntry
from tests.studio.conftest import MakeUser
from tests.studio.support import PASSWORD, StudioClient


def signed_in(app: Flask, name: str, password: str = PASSWORD) -> StudioClient:
    client: StudioClient = app.test_client()  # type: ignore[assignment]
    assert client.login(name, password).status_code == 302
    return client


def audit_entries(app: Flask) -> list[tuple[str, str, str | None]]:
    with app.app_context():
        return [
            (e.command, e.target, e.by)
            for e in db.session.scalars(select(AuditEntry).order_by(AuditEntry.id))
        ]


def test_an_admin_creates_a_viewer_who_can_sign_in_and_it_is_audited(app: Flask, make_user: MakeUser) -> None:
    # Given
    make_user("ada", users.ADMIN)
    admin = signed_in(app, "ada")

    # When
    answer = admin.command("/people/", {"name": "vera", "password": PASSWORD, "role": "viewer"}, htmx=False)

    # Then
    assert answer.status_code == 303
    page = admin.get("/people/")
    assert "Created viewer vera: they can sign in now." in page.text
    assert 'data-user="vera"' in page.text
    assert signed_in(app, "vera").get("/").status_code == 200
    assert audit_entries(app) == [("user_create", "user:vera", "ada")]


def test_a_new_user_with_a_bad_name_or_password_is_refused_saying_why(
    app: Flask, make_user: MakeUser
) -> None:
    make_user("ada", users.ADMIN)
    admin = signed_in(app, "ada")

    short = admin.command("/people/", {"name": "vera", "password": "short", "role": "viewer"})
    assert short.status_code == 400
    assert "the password is too short" in short.text
    bad_role = admin.command("/people/", {"name": "vera", "password": PASSWORD, "role": "boss"})
    assert bad_role.status_code == 400
    assert "&#39;boss&#39; is not a role" in bad_role.text
    with app.app_context():
        assert users.find("vera") is None


def test_an_admin_changes_a_role_and_the_user_gets_its_powers(app: Flask, make_user: MakeUser) -> None:
    make_user("ada", users.ADMIN)
    victor = make_user("victor", users.VIEWER)
    admin = signed_in(app, "ada")

    answer = admin.command(f"/people/{victor.id}/role", {"role": "operator"})

    assert answer.status_code == 200
    assert "victor is now an operator." in answer.text
    with app.app_context():
        assert users.find("victor").role == users.OPERATOR  # type: ignore[union-attr]
    assert audit_entries(app) == [("user_role", "user:victor", "ada")]


def test_the_last_admin_can_be_neither_demoted_nor_disabled(app: Flask, make_user: MakeUser) -> None:
    ada = make_user("ada", users.ADMIN)
    admin = signed_in(app, "ada")

    demoted = admin.command(f"/people/{ada.id}/role", {"role": "viewer"})

    assert demoted.status_code == 400
    assert "ada is the last admin: make another user an admin first" in demoted.text
    assert admin.command(f"/people/{ada.id}/disable").status_code == 400
    with app.app_context():
        assert users.find("ada").role == users.ADMIN  # type: ignore[union-attr]


def test_a_disabled_user_is_signed_out_and_cannot_sign_in_until_enabled(
    app: Flask, make_user: MakeUser
) -> None:
    # Given an operator signed in
    make_user("ada", users.ADMIN)
    olga = make_user("olga", users.OPERATOR)
    admin = signed_in(app, "ada")
    operator = signed_in(app, "olga")

    # When the admin disables her
    assert admin.command(f"/people/{olga.id}/disable").status_code == 200

    # Then her session has ended, and signing in says why
    assert operator.get("/").status_code == 302
    refused = operator.login("olga")
    assert refused.status_code == 403
    assert "olga is disabled: ask an admin" in refused.text

    # When enabled again, she signs in
    assert admin.command(f"/people/{olga.id}/enable").status_code == 200
    assert operator.login("olga").status_code == 302
    assert [c for c, _, _ in audit_entries(app)] == ["user_disable", "user_enable"]


def test_the_people_page_is_for_admins_only(
    operator_client: StudioClient, viewer_client: StudioClient, app: Flask, make_user: MakeUser
) -> None:
    for client in (operator_client, viewer_client):
        assert client.get("/people/").status_code == 403
        assert (
            client.command("/people/", {"name": "x", "password": PASSWORD, "role": "admin"}).status_code
            == 403
        )
    assert 'href="/people/"' not in operator_client.get("/").text
    make_user("ada", users.ADMIN)
    assert 'href="/people/"' in signed_in(app, "ada").get("/").text
    with app.app_context():
        assert users.find("x") is None


def test_an_unknown_user_is_a_404_that_says_so(app: Flask, make_user: MakeUser) -> None:
    make_user("ada", users.ADMIN)
    admin = signed_in(app, "ada")
    answer = admin.command("/people/4242/disable")
    assert answer.status_code == 404
    assert "There is no user 4242" in answer.text
    assert admin.command("/people/99999999999999999999/disable").status_code == 404


# --- session revocation -------------------------------------------------------------------------


def test_signing_out_ends_the_users_other_sessions(app: Flask, make_user: MakeUser) -> None:
    # Given olga signed in on two browsers
    make_user("olga", users.OPERATOR)
    laptop = signed_in(app, "olga")
    phone = signed_in(app, "olga")
    assert phone.get("/").status_code == 200

    # When she signs out on the laptop
    assert laptop.command("/logout", htmx=False).status_code == 302

    # Then the phone's session has ended too
    assert phone.get("/").status_code == 302
    assert laptop.get("/").status_code == 302
    # and a new sign-in works
    assert signed_in(app, "olga").get("/").status_code == 200


def test_a_stolen_cookie_stops_working_once_its_user_signs_out(app: Flask, make_user: MakeUser) -> None:
    """The cookie is signed, not stored: replaying a copy made before sign-out is refused."""
    make_user("olga", users.OPERATOR)
    browser = signed_in(app, "olga")
    cookie = browser.get_cookie("stepwise_session")
    assert cookie is not None
    browser.command("/logout", htmx=False)

    thief: StudioClient = app.test_client()  # type: ignore[assignment]
    thief.set_cookie("stepwise_session", cookie.value)

    assert thief.get("/").status_code == 302


def test_changing_the_password_keeps_this_session_and_ends_the_others(
    app: Flask, make_user: MakeUser
) -> None:
    # Given
    make_user("olga", users.OPERATOR)
    laptop = signed_in(app, "olga")
    phone = signed_in(app, "olga")

    # When she changes her password on the laptop
    changed = laptop.command(
        "/account/password",
        {
            "current_password": PASSWORD,
            "new_password": "a brand new password",
            "new_password_again": "a brand new password",
        },
        htmx=False,
    )

    # Then the laptop stays signed in, the phone is signed out, the new password works
    assert changed.status_code == 302
    assert "Your password is changed" in laptop.get("/").text
    assert laptop.get("/").status_code == 200
    assert phone.get("/").status_code == 302
    assert phone.login("olga").status_code == 401
    assert phone.login("olga", "a brand new password").status_code == 302


def test_a_password_change_with_a_wrong_current_password_changes_nothing(
    app: Flask, make_user: MakeUser
) -> None:
    make_user("olga", users.OPERATOR)
    laptop = signed_in(app, "olga")
    phone = signed_in(app, "olga")

    wrong = laptop.command(
        "/account/password",
        {
            "current_password": "not it",
            "new_password": "a brand new password",
            "new_password_again": "a brand new password",
        },
        htmx=False,
    )
    differ = laptop.command(
        "/account/password",
        {
            "current_password": PASSWORD,
            "new_password": "a brand new password",
            "new_password_again": "another one",
        },
        htmx=False,
    )

    assert wrong.status_code == 400
    assert "Your current password is not right." in wrong.text
    assert differ.status_code == 400
    assert "The two new passwords differ." in differ.text
    assert phone.get("/").status_code == 200
    assert signed_in(app, "olga").get("/").status_code == 200


def test_a_password_set_on_the_command_line_ends_the_users_sessions(app: Flask, make_user: MakeUser) -> None:
    make_user("olga", users.OPERATOR)
    browser = signed_in(app, "olga")

    with app.app_context():
        users.find("olga").set_password("a brand new password")  # type: ignore[union-attr]
        db.session.commit()

    assert browser.get("/").status_code == 302
