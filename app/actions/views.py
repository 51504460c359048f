"""Actions list: filters in the URL (shareable), search in the arguments, keyset pagination,
capped counts, the error of each failure; failures grouped by error; and the bulk commands,
over the ticked rows or the whole filter (cancel or retry the selected or all matching: the
count first, a confirmation, then the progress of the engine's bulk run, which a worker
performs: a restarted web process neither loses nor orphans it).

The single action's page (``/actions/<id>``) is another module's (``action.py``); rows link
to it by URL. The list and the bulk commands read the same ``engine.commands.ActionFilter``,
so a bulk command acts on exactly what the list shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Blueprint, abort, redirect, request, url_for
from werkzeug.wrappers import Response

from engine import bulk_work, clock, commands, status
from engine.audit import AuditEntry

from .. import queries, time_ranges
from ..database import db
from ..security import users
from ..security.auth import current_user, requires
from ..views import command_response, is_htmx, render, wants_fragment
from . import queries as queries_actions
from .filters import FILTER_FIELDS, Filters, parse_filters

bp = Blueprint("actions", __name__, url_prefix="/actions")


@bp.app_template_global()
def action_href(action_id: int) -> str:
    """The URL of an action's page (``action.show``, another module's): by path, so the list
    does not depend on that module's names."""
    return f"/actions/{int(action_id)}"


def parse_id(name: str) -> int | None:
    raw = (request.args.get(name) or "").strip()
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) >= 2**63:
        abort(400, description=f"{name}={raw!r} is not an action id: pages are found by id (?{name}=1234).")
    return int(raw)


def canonical_url(filters: Filters, **extra: Any) -> str:
    params = filters.params(**extra)
    return url_for("actions.index", **params)


# --- the list --------------------------------------------------------------------------------------


@bp.get("/")
def index() -> Response:
    filters = parse_filters(request.args)
    before, after = parse_id("before"), parse_id("after")
    if before is not None:
        after = None  # one direction at a time: older than ``before`` wins
    canonical = canonical_url(filters, before=before, after=after)
    plain_form = any(not v.strip() for v in request.args.values()) or (
        request.args.get(time_ranges.FIELD) == time_ranges.CUSTOM
    )
    if not is_htmx() and not filters.errors and plain_form:
        # The empty fields (and the "custom" time range) of the plain GET form: send the
        # browser to the short URL.
        return redirect(canonical)
    context = list_context(filters, before=before, after=after)
    response = render(
        "actions/index.html", "actions/_list.html", status=400 if filters.errors else 200, **context
    )
    if wants_fragment():
        # The filter form's swap pushes this URL into the history: the short one.
        response.headers["HX-Push-Url"] = canonical
    return response


def list_context(filters: Filters, *, before: int | None = None, after: int | None = None) -> dict[str, Any]:
    session: Any = db.session
    context: dict[str, Any] = {
        "filters": filters,
        "verbs": applicable_verbs(filters),
        "statuses": status.ACTION_STATUSES,
        "names": queries_actions.known_names(),
        "actor_types": queries_actions.known_actor_types(),
        "now": clock.now(),
        "before": before,
        "after": after,
        "cap": queries.CAP,
        "presets": [(preset.key, preset.label) for preset in time_ranges.PRESETS.values()],
    }
    if filters.errors:
        return {**context, "page": None, "count": None}
    page = queries_actions.list_page(
        session, filters.where, before=before, after=after, size=queries_actions.PAGE_SIZE
    )
    # A search in the arguments has no index: counting its matches may read the whole
    # table, so the list comes first and its count is asked for separately (/actions/count).
    count = None if deferred_count(filters) else count_of(filters)
    return {**context, "page": page, "count": count, "causes": queries_actions.causes(session, page.rows)}


def deferred_count(filters: Filters) -> bool:
    return bool(filters.where.search)


def count_of(filters: Filters) -> queries.Count:
    session: Any = db.session
    return queries_actions.matching_count(session, filters.where, cap=queries.CAP)


@bp.get("/count")
def count() -> Response:
    """How many actions match the filter (capped): the list loads it after itself when
    counting is slow (a search in the arguments); a plain link without JavaScript."""
    filters = parse_filters(request.args)
    if filters.errors:
        problems = "; ".join(f"{name}: {message}" for name, message in filters.errors.items())
        abort(400, description=f"The filter is not valid ({problems}).")
    return render(
        "actions/count.html", "actions/_count.html", filters=filters, count=count_of(filters), cap=queries.CAP
    )


# --- failures grouped by error --------------------------------------------------------------------


@bp.get("/errors")
def errors() -> Response:
    """Failed and timed-out actions grouped by the class of the error they raised: how many,
    the newest, and a link to the list of each (where they can be selected and retried);
    over every failure, or those created in a time-range preset (``window=24h``)."""
    raw = (request.args.get(time_ranges.FIELD) or "").strip()
    preset, problem = time_ranges.parse(raw, custom=False)
    if problem:
        abort(400, description=f"{time_ranges.FIELD}: {problem}")
    session: Any = db.session
    since = preset.since() if preset is not None else None
    groups, sample_full = queries_actions.failure_groups(session, since=since)
    return render(
        "actions/errors.html",
        "actions/_errors.html",
        groups=groups,
        sample_full=sample_full,
        scan=queries_actions.SCAN,
        preset=preset,
        since=since,
        presets=[(p.key, p.label) for p in time_ranges.PRESETS.values()],
    )


# --- bulk commands -------------------------------------------------------------------------------

VERBS = {
    "cancel": {
        "eligible": status.INCOMPLETE,
        "label": "Cancel",
        "done": "cancelled",
        "which": "pending or performing",
    },
    "retry": {
        "eligible": status.RETRYABLE,
        "label": "Retry",
        "done": "retried",
        "which": "failed, timed out or cancelled",
    },
}


def applicable_verbs(filters: Filters) -> list[str]:
    """The bulk commands that can change something the filter matches: a filter on a status
    offers only the verbs that act on that status (no "cancel" for failed actions)."""
    state = filters.where.status
    return [verb for verb, command in VERBS.items() if state is None or state in command["eligible"]]


def verb_of(value: str | None) -> str:
    if value not in VERBS:
        abort(400, description=f"A bulk command is cancel or retry, not {value!r}.")
    return value


def bulk_filters(args: Mapping[str, str]) -> Filters:
    filters = parse_filters(args)
    if filters.errors:
        problems = "; ".join(f"{name}: {message}" for name, message in filters.errors.items())
        abort(400, description=f"The filter is not valid, so nothing was changed ({problems}).")
    return filters


@bp.get("/bulk/confirm")
@requires(users.OPERATOR)
def bulk_confirm() -> Response:
    """Step one of a bulk command: how many actions it would change, and a confirmation."""
    verb = verb_of(request.args.get("verb"))
    filters = bulk_filters(request.args)
    session: Any = db.session
    eligible = queries_actions.eligible_count(
        session, filters.where, VERBS[verb]["eligible"], cap=queries.CAP
    )
    matching = queries_actions.matching_count(session, filters.where, cap=queries.CAP)
    return render(
        "actions/bulk_confirm.html",
        "actions/_bulk_confirm.html",
        verb=verb,
        command=VERBS[verb],
        filters=filters,
        eligible=eligible,
        matching=matching,
        cap=queries.CAP,
    )


@bp.post("/bulk")
@requires(users.OPERATOR)
def bulk_run() -> Response:
    """Step two: hand the bulk command to the workers; answer with its progress."""
    verb = verb_of(request.form.get("verb"))
    filters = bulk_filters(request.form)
    reason = (request.form.get("reason") or "").strip() or None
    user = current_user()
    entry_id = start_bulk(verb, filters.where, by=user.name if user else None, reason=reason)
    session: Any = db.session
    entry = queries_actions.bulk_entry(session, entry_id)
    assert entry is not None
    return command_response(
        f"Bulk {verb} started: {entry.total or 0:,} matching actions (audit entry {entry.id}).",
        fragment="actions/_bulk_progress.html",
        redirect_to=url_for("actions.bulk_progress", entry_id=entry.id),
        **progress_context(entry),
    )


@bp.get("/bulk/<int:entry_id>")
def bulk_progress(entry_id: int) -> Response:
    """A bulk command's progress: polls itself until the command is finished."""
    session: Any = db.session
    entry = queries_actions.bulk_entry(session, entry_id)
    if entry is None:
        abort(404, description=f"There is no bulk command with audit entry {entry_id}.")
    return render("actions/bulk_progress.html", "actions/_bulk_progress.html", **progress_context(entry))


def progress_context(entry: AuditEntry) -> dict[str, Any]:
    verb = entry.command.removeprefix("bulk_")
    described = (entry.data or {}).get("filter") or {}
    params: dict[str, str] = {}
    for name, field_name in FILTER_FIELDS.items():
        value = described.get(field_name)
        if isinstance(value, list):
            params[name] = ",".join(str(v) for v in value)
        elif value:
            params[name] = "1" if value is True else str(value)
    # A filter that acted on every level of failed trees says so (failures list roots otherwise).
    params.setdefault("roots", "1" if described.get("roots_only") else "0")
    filters = parse_filters(params)
    error = (entry.data or {}).get("error")
    finished = entry.finished_at is not None or error is not None
    session: Any = db.session
    run = bulk_work.run_of(session, entry.id)
    stalled = run is not None and not finished and run.updated_at < clock.now() - bulk_work.STALE
    total = entry.total or 0
    done = min(entry.done or 0, total) if total else entry.done or 0
    return {
        "entry": entry,
        "verb": verb,
        "command": VERBS.get(verb, {"label": verb.capitalize(), "done": verb, "which": ""}),
        "filters": filters,
        "finished": finished,
        "error": error,
        "run": run,
        "stalled": stalled,
        "total": total,
        "done": done,
        "percent": round(100 * done / total) if total else 100,
    }


def start_bulk(verb: str, where: commands.ActionFilter, *, by: str | None, reason: str | None) -> int:
    """Record the bulk command and hand it to the workers (``engine.bulk_work``): durable
    engine work, with its progress in the database, not a thread of this web process."""
    return bulk_work.start(verb, where, by=by, reason=reason)
