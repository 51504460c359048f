"""The studio's hardening at the edge: security headers on every answer, rate limits on
sign-in and on the webhooks, and the bounds of what a request may carry.

Every answer carries a Content-Security-Policy with no ``unsafe-inline`` nor ``unsafe-eval``:
scripts and styles come from the studio's own ``static/`` only (htmx runs with
``allowEval: false``; polling pauses through ``static/studio.js``, not an inline filter). A
template must therefore never write a ``<script>`` body, an ``on*=`` handler, a ``style=``
attribute or an ``hx-on``/``js:`` expression.

Sign-in is throttled by failures, per user name and per address (Flask-Limiter); the 429
says when to try again (``Retry-After`` and in words). The limits' storage is in memory
unless ``RATELIMIT_STORAGE_URI`` names a shared one (``redis://…``) for several processes.
"""

from __future__ import annotations

import time
from typing import Any

from flask import Flask, abort, current_app, make_response, request
from flask.typing import ResponseReturnValue
from flask_limiter import Limiter, RequestLimit
from flask_limiter.util import get_remote_address
from werkzeug.exceptions import TooManyRequests
from werkzeug.wrappers import Response

#: The policy of every page: nothing inline, nothing from elsewhere, never framed.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)

HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    # Same-origin referrers only: "Go back" links and a command's redirect back use them;
    # other sites never learn the studio's URLs (ids, filters).
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}

#: The largest id or integer a URL may carry: a signed 64-bit column's.
MAX_ID = 2**63 - 1

DEFAULTS: dict[str, Any] = {
    #: Failed sign-ins allowed per user name, and per address, before a 429.
    "STEPWISE_LOGIN_LIMIT_PER_USER": "5 per 5 minutes",
    "STEPWISE_LOGIN_LIMIT_PER_ADDRESS": "20 per 5 minutes",
    #: Deliveries per address to the webhooks.
    "STEPWISE_WEBHOOK_LIMIT": "120 per minute",
    "RATELIMIT_STORAGE_URI": "memory://",
    "RATELIMIT_HEADERS_ENABLED": False,
    #: No request body above this (413): a form or a webhook is a few kilobytes.
    "MAX_CONTENT_LENGTH": 1024 * 1024,
    "MAX_FORM_MEMORY_SIZE": 512 * 1024,
    "MAX_FORM_PARTS": 200,
}

limiter = Limiter(key_func=get_remote_address, default_limits=[], strategy="moving-window")


def refuse_out_of_range_ids() -> None:
    """An ``<int:…_id>`` in a URL larger than a BIGINT column holds names nothing: a 404
    that says so, before any view hands it to the database driver (which would overflow)."""
    for name, value in (request.view_args or {}).items():
        if isinstance(value, int) and value > MAX_ID:
            noun = name.removesuffix("_id").replace("_", " ")
            unchanged = ", so nothing was changed" if request.method not in ("GET", "HEAD") else ""
            abort(404, description=f"There is no {noun} {value}{unchanged}.")


def refuse_nul_characters() -> None:
    """No field of a URL or a form may hold a NUL character: no studio value has one, and
    PostgreSQL cannot store or compare one. Refused here, naming the field, for every view
    but the API's, which answers its own ``bad_parameter`` for it (app/api/views.py)."""
    if request.path.startswith("/api/"):
        return
    fields = [*(request.view_args or {}).items(), *request.args.items(multi=True)]
    if request.mimetype in ("application/x-www-form-urlencoded", "multipart/form-data"):
        fields += request.form.items(multi=True)
    for name, value in fields:
        if isinstance(value, str) and "\x00" in value:
            abort(
                400,
                description=f"The field {name!r} holds a NUL character, which no value here may: remove it.",
            )


def add_headers(response: Response) -> Response:
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    return response


# --- rate limits --------------------------------------------------------------------------------


def _config(name: str) -> Any:
    return lambda: current_app.config[name]


def _user_key() -> str:
    return "user:" + (request.form.get("name") or "").strip().lower()[:80]


def _failed_sign_in(response: Response) -> bool:
    return response.status_code == 401


def sign_in_limits(view: Any) -> Any:
    """Throttle a sign-in view's failures per user name and per address."""
    per_user = limiter.limit(
        _config("STEPWISE_LOGIN_LIMIT_PER_USER"),
        key_func=_user_key,
        methods=["POST"],
        deduct_when=_failed_sign_in,
        scope="sign-in-user",
        error_message="user",
    )
    per_address = limiter.limit(
        _config("STEPWISE_LOGIN_LIMIT_PER_ADDRESS"),
        methods=["POST"],
        deduct_when=_failed_sign_in,
        scope="sign-in-address",
        error_message="address",
    )
    return per_user(per_address(view))


def webhook_limits(bp: Any) -> None:
    limiter.limit(_config("STEPWISE_WEBHOOK_LIMIT"), scope="webhooks", error_message="webhook")(bp)


def retry_after() -> int:
    """Seconds until the breached limit of this request lets a request through again."""
    limit: RequestLimit | None = limiter.current_limit
    if limit is None:
        return 60
    return max(1, int(limit.reset_at - time.time()))


def too_many(error: TooManyRequests) -> ResponseReturnValue:
    from ..views import handle_error, render

    seconds = retry_after()
    when = f"{seconds} second{'s' if seconds != 1 else ''}"
    which = error.description
    if which in ("user", "address"):
        error.description = (
            f"Too many failed sign-ins {'for this name' if which == 'user' else 'from your address'}: "
            f"try again in {when}."
        )
        name = request.form.get("name")
        response = render("auth/login.html", status=429, error=error.description, name=name)
    else:
        error.description = f"Too many requests: try again in {when}."
        response = make_response(handle_error(error))
        response.status_code = 429
    response.headers["Retry-After"] = str(seconds)
    return response


def init_app(app: Flask) -> None:
    """``create_app`` has put ``DEFAULTS`` in the configuration."""
    limiter.init_app(app)
    app.before_request(refuse_out_of_range_ids)
    app.before_request(refuse_nul_characters)
    app.after_request(add_headers)
    app.register_error_handler(429, too_many)
