"""Signing in and out, changing one's password, and who may do what.

Every view needs a signed-in user unless it is marked ``@public`` (the sign-in page, the
completion webhook, which checks its own signature). Commands are marked
``@requires("operator")``, the People page ``@requires("admin")``: a user below the role gets
403 with a page, or a message fragment for htmx.

A session holds the user's id and their ``session_generation`` at sign-in. Signing out and
a new password move the generation on, which ends every other session of that user at its
next request; so does an admin disabling the user, or deleting them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from flask import (
    Blueprint,
    Flask,
    Response,
    abort,
    current_app,
    flash,
    g,
    jsonify,
    redirect,
    request,
    session,
    url_for,
)
from werkzeug.wrappers import Response as BaseResponse

from ..views import render, wants_json
from . import csrf, users
from . import hardening as security

bp = Blueprint("auth", __name__)

F = TypeVar("F", bound=Callable[..., Any])


def public(view: F) -> F:
    """Let anyone reach this view, signed in or not."""
    cast(Any, view).public = True
    return view


def requires(role: str) -> Callable[[F], F]:
    """Refuse the view (403) to signed-in users below ``role``: ``@requires("operator")``."""
    users.check_role(role)

    def decorate(view: F) -> F:
        @wraps(view)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            user = g.get("user")
            if user is None or not user.can(role):
                abort(
                    403,
                    description=(
                        f"You are signed in as {user.name} ({user.role}). Only an {role} may do "
                        "this: viewers see everything but change nothing. Ask an operator, or "
                        f"have an administrator run `stepwise users role {user.name} {role}`."
                        if user is not None
                        else f"Only an {role} may do this."
                    ),
                )
            return view(*args, **kwargs)

        cast(Any, guarded).required_role = role
        return cast(F, guarded)

    return decorate


def current_user() -> users.User | None:
    return cast("users.User | None", g.get("user"))


#: The session's keys: who signed in, and their session generation then.
USER_KEY = "user_id"
GENERATION_KEY = "generation"


def load_user() -> None:
    """The signed-in user, if the session is still theirs: a disabled user, or a session
    older than the user's last sign-out or new password, is signed out here."""
    user_id = session.get(USER_KEY)
    user = users.get(user_id) if isinstance(user_id, int) and 0 < user_id <= security.MAX_ID else None
    if user is not None and (user.disabled or session.get(GENERATION_KEY, 0) != user.session_generation):
        user = None
    if user is None and user_id is not None:
        session.clear()
    g.user = user


def start_session(user: users.User) -> None:
    """A new session for ``user`` (no session fixation), with a new CSRF token."""
    session.clear()
    session.permanent = True
    session[USER_KEY] = user.id
    session[GENERATION_KEY] = user.session_generation
    csrf.rotate()


def require_login() -> BaseResponse | None:
    if request.endpoint is None or request.endpoint == "static":
        return None  # a 404, or a static file
    view = current_app.view_functions.get(request.endpoint)
    if getattr(view, "public", False) or g.get("user") is not None:
        return None
    target = url_for("auth.login", next=request.full_path.rstrip("?") if request.method == "GET" else None)
    if wants_json():
        response = jsonify(error="not signed in", login=url_for("auth.login"))
        response.status_code = 401
        return response
    if request.headers.get("HX-Request") == "true":
        # htmx follows HX-Redirect with a full page load.
        return Response(status=204, headers={"HX-Redirect": target})
    return redirect(target)


def safe_next(target: str | None) -> str:
    """Only a path on this site: never an open redirect."""
    if not target:
        return url_for("overview.index")
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return url_for("overview.index")
    return target


@bp.route("/login", methods=["GET", "POST"])
@public
@security.sign_in_limits
def login() -> Any:
    if request.method == "GET":
        if g.get("user") is not None:
            return redirect(safe_next(request.args.get("next")))
        return render("auth/login.html", next=request.args.get("next", ""))
    name = request.form.get("name", "").strip()
    user = users.authenticate(name, request.form.get("password", ""))
    if user is None:
        return render(
            "auth/login.html",
            status=401,
            error="Unknown name or wrong password.",
            name=name,
            next=request.form.get("next", ""),
        )
    if user.disabled:
        return render(
            "auth/login.html",
            status=403,
            error=f"{user.name} is disabled: ask an admin to enable you again (People page).",
            name=name,
            next=request.form.get("next", ""),
        )
    start_session(user)
    return redirect(safe_next(request.form.get("next")))


@bp.route("/logout", methods=["POST"])
@public
def logout() -> BaseResponse:
    """Sign out here and everywhere: every session of this user ends."""
    user = current_user()
    if user is not None:
        user.end_sessions()
        users.commit()
    session.clear()
    return redirect(url_for("auth.login"))


@bp.route("/account/password", methods=["GET", "POST"])
def password() -> Any:
    """Change one's own password: this session stays, every other one of the user ends."""
    user = current_user()
    assert user is not None  # require_login ran
    if request.method == "GET":
        return render("auth/password.html")
    current = request.form.get("current_password", "")
    new = request.form.get("new_password", "")
    if not user.check_password(current[: users.MAX_PASSWORD]):
        return render("auth/password.html", status=400, error="Your current password is not right.")
    if new != request.form.get("new_password_again", ""):
        return render("auth/password.html", status=400, error="The two new passwords differ.")
    try:
        user.set_password(new)  # moves the session generation on
    except users.UserError as error:
        return render("auth/password.html", status=400, error=f"The new password: {error}.")
    users.commit()
    start_session(user)
    flash("Your password is changed; your other sessions are signed out.", "success")
    return redirect(url_for("overview.index"))


def init_app(app: Flask) -> None:
    app.before_request(load_user)
    app.before_request(require_login)
    app.register_blueprint(bp)
    app.jinja_env.globals["current_user"] = current_user
    app.jinja_env.globals["ROLE_MEANINGS"] = users.ROLE_MEANINGS
