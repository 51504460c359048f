"""How views answer: the whole page, or only its fragment for htmx; commands' answers; error
pages; the template filters every page shares and the links to actions several areas share.

A fragment is a real template that the page includes, so the page and the htmx swap are
rendered by the same code. Views stay thin: read through their area's read model, change
through ``engine.commands``, answer with ``render`` or ``command_response``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from flask import Flask, abort, flash, make_response, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import HTTPException
from werkzeug.routing import BuildError
from werkzeug.wrappers import Response

from engine import clock, status


def is_htmx() -> bool:
    return request.headers.get("HX-Request") == "true"


def wants_fragment() -> bool:
    """An htmx swap of part of the page; a boosted link or a history restore wants it whole."""
    return (
        is_htmx()
        and request.headers.get("HX-Boosted") != "true"
        and request.headers.get("HX-History-Restore-Request") != "true"
    )


#: Paths whose every answer is JSON, whatever the client accepts: the API and the webhooks
#: (a 401 is JSON there, never a redirect to the sign-in page; so are their 404 and 405).
JSON_PATHS = ("/api/", "/webhooks/")


def wants_json() -> bool:
    """A client that prefers JSON to HTML (an API client, not a browser nor htmx)."""
    if request.path.startswith(JSON_PATHS):
        return True
    return request.accept_mimetypes.best_match(["text/html", "application/json"]) == "application/json"


def render(template: str, fragment: str | None = None, *, status: int = 200, **context: Any) -> Response:
    """The full page ``template``, or only ``fragment`` (a template the page includes) when
    htmx asks for part of the page: ``render("actions/index.html", "actions/_list.html", ...)``."""
    name = fragment if fragment is not None and wants_fragment() else template
    response = make_response(render_template(name, **context), status)
    # Caches must keep the page and the fragment of one URL apart.
    response.vary.add("HX-Request")
    return response


def action_url(action_id: int) -> str:
    """The action page of ``action_id``."""
    try:
        return url_for("action.show", action_id=action_id)
    except BuildError:  # the action page's area is not registered (a trimmed app)
        return f"{url_for('actions.index')}{action_id}"


def links() -> dict[str, Any]:
    """Template helpers shared by the lanes, achievements, catalog and audit pages."""
    return {"action_url": action_url}


def command_response(
    message: str,
    *,
    ok: bool = True,
    fragment: str | None = None,
    redirect_to: str | None = None,
    status: int | None = None,
    **context: Any,
) -> Response:
    """The answer to a command (a POST built by ``command_form``).

    htmx: the updated ``fragment`` (rendered with ``context``), with ``message`` swapped into
    the page's message area out of band. Without JavaScript: ``message`` is flashed and the
    browser is sent back to ``redirect_to`` (default: the page it came from), Post/Redirect/Get.
    A command that changed nothing (``ok=False``) answers 409 unless ``status`` says otherwise.
    """
    category = "success" if ok else "warning"
    code = status if status is not None else (200 if ok else 409)
    if is_htmx():
        body = render_template(fragment, **context) if fragment is not None else ""
        body += render_template("_flash.html", flash_messages=[(category, message)], flash_oob=True)
        response = make_response(body, code)
        response.vary.add("HX-Request")
        return response
    flash(message, category)
    return redirect(redirect_to or request.referrer or url_for("overview.index"), code=303)


#: The largest integer a parameter may carry: a signed 64-bit column's (BIGINT).
MAX_INT = 2**63 - 1


def int_arg(name: str, *, low: int = 0, high: int = MAX_INT) -> int | None:
    """The query parameter ``name`` as an integer from ``low`` to ``high``, None when absent
    or empty; anything else is a 400 that names the parameter (never an overflow inside the
    database driver)."""
    raw = (request.args.get(name) or "").strip()
    if not raw:
        return None
    if not (raw.isascii() and raw.lstrip("-").isdigit()) or len(raw) > 20 or not low <= int(raw) <= high:
        abort(400, description=f"{name}={raw[:40]!r} is not a whole number from {low} to {high:,}.")
    return int(raw)


def handle_error(error: HTTPException) -> ResponseReturnValue:
    """Error pages that say what went wrong; for htmx, a message put in the page's message
    area (the swap's own target is left as it was)."""
    code = error.code or 500
    if wants_json():
        return {"error": error.name, "message": error.description}, code
    if is_htmx():
        response = make_response(
            render_template("_flash.html", flash_messages=[("error", error.description)], flash_oob=False),
            code,
        )
        response.headers["HX-Retarget"] = "#flash"
        response.headers["HX-Reswap"] = "innerHTML"
        return response
    return render_template("error.html", error=error), code


# --- filters ---------------------------------------------------------------------------------


def ago(value: datetime | None) -> str:
    """``12s ago``, ``3m ago``, ``in 5s``: times are naive UTC, like the engine's."""
    if value is None:
        return "—"
    seconds = (clock.now() - value).total_seconds()
    text = duration(abs(seconds))
    return f"in {text}" if seconds < 0 else f"{text} ago"


def duration(value: float | timedelta | None) -> str:
    """``850ms``, ``12s``, ``3m 05s``, ``2h 10m``, ``3d 4h``."""
    if value is None:
        return "—"
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def timestamp(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "—"


def init_app(app: Flask) -> None:
    app.register_error_handler(HTTPException, handle_error)
    app.jinja_env.filters.update(ago=ago, duration=duration, timestamp=timestamp)
    app.jinja_env.globals.update(
        ACTION_STATUSES=status.ACTION_STATUSES,
        INCOMPLETE=status.INCOMPLETE,
        is_htmx=is_htmx,
    )
