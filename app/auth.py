"""Signing in and out, and who may do what.

Every view needs a signed-in user unless it is marked ``@public`` (the sign-in page, the
completion webhook, which checks its own signature). Commands are marked
``@requires("operator")``: a viewer gets 403 with a page, or a message fragment for htmx.
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
    g,
    jsonify,
    redirect,
    request,
    session,
    url_for,
)
from werkzeug.wrappers import Response as BaseResponse

from . import csrf, security, users
from .views import render, wants_json

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


def load_user() -> None:
    user_id = session.get("user_id")
    g.user = users.get(user_id) if isinstance(user_id, int) else None


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
    # A new session at sign-in (no session fixation), with a new CSRF token.
    session.clear()
    session.permanent = True
    session["user_id"] = user.id
    csrf.rotate()
    return redirect(safe_next(request.form.get("next")))


@bp.route("/logout", methods=["POST"])
@public
def logout() -> BaseResponse:
    session.clear()
    return redirect(url_for("auth.login"))


def init_app(app: Flask) -> None:
    app.before_request(load_user)
    app.before_request(require_login)
    app.register_blueprint(bp)
    app.jinja_env.globals["current_user"] = current_user
