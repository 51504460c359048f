"""Schedules: each schedule with its rule in words, its time zone, its next ticks and its
last runs (links to the actions they started, with their statuses), paused or not; and the
operators' commands: create, edit (a schedule's own page), pause, resume, trigger now,
delete. Every command goes through ``engine.schedules``, which audits it with the operator's
name.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

from flask import Blueprint, abort, request, url_for
from werkzeug.wrappers import Response

from engine import schedules
from engine.schedules.tables import MISSED_POLICIES, OVERLAP_POLICIES, SKIP

from ..catalog import definitions as catalog
from ..database import db
from ..security import users
from ..security.auth import current_user, requires, safe_next
from ..views import command_response, render
from . import queries as queries_schedules

bp = Blueprint("schedules", __name__, url_prefix="/schedules")

#: The form's fields, each refused by name when wrong.
FIELDS = (
    "name",
    "cron",
    "every",
    "timezone",
    "actor_type",
    "actor_id",
    "action",
    "arguments",
    "missed",
    "overlap",
)
MAX_FIELD = 500


def page_context(**form: str) -> dict[str, Any]:
    values = {
        "name": "",
        "cron": "",
        "every": "",
        "timezone": schedules.DEFAULT_TIMEZONE,
        "actor_type": "",
        "actor_id": "",
        "action": "",
        "arguments": "[]",
        "missed": SKIP,
        "overlap": SKIP,
    }
    values.update(form)
    return {
        "rows": queries_schedules.rows(db.session()),
        "actor_types": catalog.actor_types(),
        "action_names": sorted({d.name for d in catalog.definitions()}),
        "missed_policies": MISSED_POLICIES,
        "overlap_policies": OVERLAP_POLICIES,
        "form": values,
        "missed_after": schedules.MISSED_AFTER,
        "limit": queries_schedules.LIMIT,
    }


@bp.get("/")
def index() -> Response:
    """Every schedule: rule, time zone, next ticks, last runs; the create form."""
    return render("schedules/index.html", "schedules/_list.html", **page_context())


@bp.get("/<int:schedule_id>")
def show(schedule_id: int) -> Response:
    """One schedule and its last runs."""
    row = queries_schedules.one(db.session(), schedule_id)
    if row is None:
        abort(404, description=f"There is no schedule {schedule_id}: it was deleted, or never existed.")
    return render(
        "schedules/show.html", row=row, missed_policies=MISSED_POLICIES, overlap_policies=OVERLAP_POLICIES
    )


def by() -> str | None:
    user = current_user()
    return user.name if user is not None else None


def refuse(field: str, message: str, what: str = "Nothing was changed.") -> NoReturn:
    abort(400, description=f"The {field.replace('_', ' ')} ({field}): {message}. {what}")


def field(name: str) -> str:
    value = request.form.get(name, "").strip()
    if "\x00" in value:
        refuse(name, "holds a NUL character")
    if len(value) > MAX_FIELD:
        refuse(name, f"is longer than {MAX_FIELD} characters")
    return value


def seconds(text: str, nothing: str) -> int | None:
    """The form's interval in whole seconds, None when empty."""
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 12:
        refuse("every", f"{text[:40]!r} is not a whole number of seconds", nothing)
    return int(text)


def json_array(text: str, nothing: str) -> list[Any]:
    try:
        args = json.loads(text or "[]")
    except (ValueError, RecursionError):
        refuse(
            "arguments", 'they are not valid JSON: write a JSON array, like ["daily"] or [] for none', nothing
        )
    if not isinstance(args, list):
        refuse("arguments", 'they must be a JSON array, like ["daily"] or [] for none', nothing)
    return args


def policies(values: dict[str, str], nothing: str) -> None:
    for policy, allowed in (("missed", MISSED_POLICIES), ("overlap", OVERLAP_POLICIES)):
        if values[policy] not in allowed:
            refuse(policy, f"{values[policy][:40]!r} is not one of {', '.join(allowed)}", nothing)


@bp.post("/")
@requires(users.OPERATOR)
def create() -> Response:
    """Create a schedule from the form; a bad field is a 400 that names it."""
    values = {name: field(name) for name in FIELDS}
    nothing = "Nothing was created."
    every = seconds(values["every"], nothing)
    args = json_array(values["arguments"], nothing)
    policies(values, nothing)
    try:
        made = schedules.create(
            values["name"],
            actor_type=values["actor_type"],
            actor_id=values["actor_id"],
            action=values["action"],
            args=args,
            cron=values["cron"] or None,
            every=every,
            timezone=values["timezone"] or None,
            missed=values["missed"],
            overlap=values["overlap"],
            by=by(),
        )
    except schedules.ScheduleError as error:
        db.session.rollback()
        refuse(error.field, str(error), nothing)
    when = f"{made.next_fire_at:%Y-%m-%d %H:%M:%S} UTC" if made.next_fire_at else "never"
    return command_response(
        f"Created schedule {made.name}: {made.rule.describe()}; its next tick is at {when}.",
        fragment="schedules/_list.html",
        redirect_to=url_for("schedules.index"),
        **page_context(),
    )


def named(schedule_id: int) -> str:
    row = db.session.get(schedules.Schedule, schedule_id)
    if row is None:
        abort(
            404,
            description=f"There is no schedule {schedule_id}: it was deleted, or never existed. "
            "Nothing was changed.",
        )
    name = row.name
    db.session.rollback()  # the engine's command locks the row in its own transaction
    return name


def answer(message: str, ok: bool = True) -> Response:
    return command_response(
        message,
        ok=ok,
        fragment="schedules/_list.html",
        redirect_to=safe_next(request.form.get("next") or url_for("schedules.index")),
        **page_context(),
    )


def gone_or(command: Any, name: str) -> Any:
    """Run an engine command on the schedule; one deleted meanwhile is a 404."""
    try:
        return command(name, by=by(), reason=field("reason") or None)
    except schedules.ScheduleError as error:
        abort(404, description=f"{error}. Nothing was changed.")


@bp.post("/<int:schedule_id>/pause")
@requires(users.OPERATOR)
def pause(schedule_id: int) -> Response:
    name = named(schedule_id)
    if gone_or(schedules.pause, name):
        return answer(f"Paused {name}: its ticks do not fire until it is resumed.")
    return answer(f"{name} is paused already: nothing was changed.", ok=False)


@bp.post("/<int:schedule_id>/resume")
@requires(users.OPERATOR)
def resume(schedule_id: int) -> Response:
    name = named(schedule_id)
    if gone_or(schedules.resume, name):
        return answer(
            f"Resumed {name}: it ticks again from now; the ticks due while it was paused are not run."
        )
    return answer(f"{name} is not paused: nothing was changed.", ok=False)


@bp.post("/<int:schedule_id>/trigger")
@requires(users.OPERATOR)
def trigger(schedule_id: int) -> Response:
    name = named(schedule_id)
    try:
        tick = schedules.trigger(name, by=by(), reason=field("reason") or None)
    except schedules.ScheduleError as error:
        return answer(f"{error}: nothing was started.", ok=False)
    return answer(f"Triggered {name} now (invocation #{tick.invocation_id}): a worker admits it to its lane.")


@bp.post("/<int:schedule_id>/delete")
@requires(users.OPERATOR)
def delete(schedule_id: int) -> Response:
    name = named(schedule_id)
    gone_or(schedules.delete, name)
    return answer(f"Deleted {name}: the actions it started stay; the audit keeps what it was.")


#: The edit form's fields (a schedule's own page): the rule, time zone, arguments, policies.
EDITABLE = ("cron", "every", "timezone", "arguments", "missed", "overlap")


@bp.post("/<int:schedule_id>/edit")
@requires(users.OPERATOR)
def edit(schedule_id: int) -> Response:
    """Change the schedule from its page's form; the form sends every field (the rule is
    the cron expression, or the interval when the cron field is empty). A new rule ticks
    from now. A bad field is a 400 that names it; one declared in code is a 409."""
    name = named(schedule_id)
    values = {key: field(key) for key in EDITABLE}
    nothing = "Nothing was changed."
    every = seconds(values["every"], nothing)
    args = json_array(values["arguments"], nothing)
    policies(values, nothing)
    here = url_for("schedules.show", schedule_id=schedule_id)
    try:
        edited = schedules.edit(
            name,
            cron=values["cron"] or None,
            every=every,
            timezone=values["timezone"] or None,
            args=args,
            missed=values["missed"],
            overlap=values["overlap"],
            by=by(),
            reason=field("reason") or None,
        )
    except schedules.DeclaredInCode as error:
        abort(409, description=f"{error}. Nothing was changed.")
    except schedules.NoSuchSchedule as error:  # deleted meanwhile
        abort(404, description=f"{error}. Nothing was changed.")
    except schedules.ScheduleError as error:
        refuse(error.field, str(error), nothing)
    if not edited.changed:
        return command_response(f"{name} is so already: nothing was changed.", ok=False, redirect_to=here)
    made = edited.schedule
    when = f"{made.next_fire_at:%Y-%m-%d %H:%M:%S} UTC" if made.next_fire_at else "never"
    changed = ", ".join(key.replace("_", " ") for key in edited.changes)
    return command_response(
        f"Edited {name} ({changed}): {made.rule.describe()}; its next tick is at {when}.",
        redirect_to=here,
    )
