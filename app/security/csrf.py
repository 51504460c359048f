"""CSRF protection: one secret token per session, required on every state-changing request.

Forms carry it in a hidden ``csrf_token`` field (``templates/macros.html`` builds every
command form, field included); htmx sends it in the ``X-CSRF-Token`` header (``hx-headers``
on ``<body>`` in ``base.html``). A request without the right token is refused with 400 before
its view runs, so nothing changes.

Views authenticated another way (the completion webhook's HMAC signature) opt out with
``@csrf.exempt`` on the view, or ``csrf.exempt(blueprint)`` for a whole blueprint.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Blueprint, Flask, abort, current_app, request, session

FIELD = "csrf_token"
HEADER = "X-CSRF-Token"
SESSION_KEY = "_csrf_token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})

F = TypeVar("F", bound=Callable[..., Any])

#: Names of the blueprints whose every view is exempt.
_exempt_blueprints: set[str] = set()


def exempt(target: Any) -> Any:
    """Exempt a view function (as a decorator) or a whole blueprint from the CSRF check.
    Only for requests authenticated without the session cookie: a signed webhook, a token."""
    if isinstance(target, Blueprint):
        _exempt_blueprints.add(target.name)
    else:
        target.csrf_exempt = True
    return target


def token() -> str:
    """This session's token, created on first use."""
    value = session.get(SESSION_KEY)
    if not isinstance(value, str):
        value = secrets.token_urlsafe(32)
        session[SESSION_KEY] = value
    return value


def rotate() -> str:
    """A new token (at sign-in, with the new session)."""
    session.pop(SESSION_KEY, None)
    return token()


def is_exempt() -> bool:
    if request.blueprint is not None and request.blueprint in _exempt_blueprints:
        return True
    view = current_app.view_functions.get(request.endpoint or "")
    return bool(getattr(view, "csrf_exempt", False))


def check() -> None:
    """Refuse a state-changing request whose token is missing or wrong (400)."""
    if request.method in SAFE_METHODS or request.endpoint is None or is_exempt():
        return
    expected = session.get(SESSION_KEY)
    sent = request.headers.get(HEADER) or request.form.get(FIELD)
    if not sent:
        abort(
            400,
            description="This form was sent without its CSRF token, so nothing was changed. "
            "Reload the page and try again.",
        )
    if not isinstance(expected, str) or not hmac.compare_digest(sent.encode(), expected.encode()):
        abort(
            400,
            description="This form's CSRF token does not match your session (it may have "
            "expired, or come from another site), so nothing was changed. Reload the page and "
            "try again.",
        )


def init_app(app: Flask) -> None:
    app.before_request(check)
    app.jinja_env.globals["csrf_token"] = token
    app.jinja_env.globals["csrf_field_name"] = FIELD
    app.jinja_env.globals["csrf_header_name"] = HEADER
