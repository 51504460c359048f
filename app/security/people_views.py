"""People: the studio's users, for admins. Create a user, change a role, disable or enable a
user; each change is audited with the admin's name, like every command. The command line
keeps the same powers (``stepwise users``).

Disabling a user ends their sessions at their next request (``users.set_disabled`` moves
their session generation on); the last enabled admin can be neither disabled nor demoted.
"""

from __future__ import annotations

from flask import Blueprint, abort, request, url_for
from werkzeug.wrappers import Response

from engine import audit

from ..database import db
from ..views import command_response, render
from . import users
from .auth import current_user, requires

bp = Blueprint("people", __name__, url_prefix="/people")


@bp.get("/")
@requires(users.ADMIN)
def index() -> Response:
    return render(
        "people/index.html",
        people=users.everyone(),
        roles=users.ROLES,
        meanings=users.ROLE_MEANINGS,
        min_password=users.MIN_PASSWORD,
    )


@bp.post("/")
@requires(users.ADMIN)
def create() -> Response:
    name = (request.form.get("name") or "").strip()
    role = request.form.get("role") or users.VIEWER
    try:
        user = users.create(name, request.form.get("password") or "", role)
    except users.UserError as error:
        return refused(f"No user was created: {error}.")
    record("user_create", user, role=user.role)
    return done(f"Created {user.role} {user.name}: they can sign in now.")


@bp.post("/<int:user_id>/role")
@requires(users.ADMIN)
def role(user_id: int) -> Response:
    user = person(user_id)
    new = request.form.get("role") or ""
    before = user.role
    try:
        users.set_role(user, new)
    except users.UserError as error:
        return refused(f"The role of {user.name} was not changed: {error}.")
    record("user_role", user, role=new, was=before)
    return done(f"{user.name} is now {'an' if new[0] in 'aeiou' else 'a'} {new}.")


@bp.post("/<int:user_id>/disable")
@requires(users.ADMIN)
def disable(user_id: int) -> Response:
    user = person(user_id)
    if user.id == current_user().id:  # type: ignore[union-attr]
        return refused("You cannot disable yourself: ask another admin.")
    try:
        users.set_disabled(user, True)
    except users.UserError as error:
        return refused(f"{user.name} was not disabled: {error}.")
    record("user_disable", user)
    return done(f"{user.name} is disabled: their sessions have ended and they cannot sign in.")


@bp.post("/<int:user_id>/enable")
@requires(users.ADMIN)
def enable(user_id: int) -> Response:
    user = person(user_id)
    users.set_disabled(user, False)
    record("user_enable", user)
    return done(f"{user.name} is enabled: they can sign in again.")


def person(user_id: int) -> users.User:
    user = users.get(user_id)
    if user is None:
        abort(404, description=f"There is no user {user_id}: see the People page for who there is.")
    return user


def record(command: str, user: users.User, **data: str) -> None:
    admin = current_user()
    audit.record(
        db.session(),
        command,
        f"user:{user.name}",
        cause="operator",
        by=admin.name if admin is not None else None,
        result="done",
        **data,
    )
    db.session.commit()


def done(message: str) -> Response:
    return command_response(message, redirect_to=url_for("people.index"))


def refused(message: str) -> Response:
    db.session.rollback()
    return command_response(message, ok=False, status=400, redirect_to=url_for("people.index"))
