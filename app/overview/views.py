"""Overview: first what needs a person (approvals and outbound actions waiting, with
Approve and Reject at hand; failed trees awaiting a decision; actions that look stuck), then
live counts beside what completed in a chosen window, runs per definition, throughput and
failures over time (an inline SVG chart) and the oldest pending action per lane.

Live figures are capped counts (``app.queries``) computed per request, so an approval that
has waited ten seconds is already listed. The window's figures read more, so each is
computed at most once per ``TTL`` (or its window's) in this process and shared by every
request and every polling tab (the fragments poll only while the tab is visible); the older
bars of a day's or a week's chart, at most once per ``OLDER_BARS_TTL``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from flask import Blueprint, abort, current_app, request, url_for
from werkzeug.wrappers import Response

from engine import clock, commands, history, status
from engine.commands import CommandResult

from .. import queries, schemas
from ..actions import queries as queries_actions
from ..database import db
from ..security import users
from ..security.auth import current_user, requires
from ..views import command_response, render
from . import queries as q
from . import queries_compensations, queries_waiting
from .chart import CHART_STATUSES, DEFAULT_WINDOW, WINDOWS, Window, draw

bp = Blueprint("overview", __name__)

T = TypeVar("T")

#: How long each figure is reused before it is computed again (the chart's: per window).
TTL = {
    "waiting": timedelta(seconds=15),
    "stuck": timedelta(seconds=15),
    # The usual duration of an action name moves slowly.
    "usual": timedelta(minutes=5),
}

#: The chart of a window with bars of an hour or longer (a day's, a week's) reads its last
#: RECENT_BARS bars at every reuse time of the window, and its older bars at most once per
#: OLDER_BARS_TTL (and whenever a bar ends): they hold only completions of the past, which
#: change only when an action completed then is retried. A week's 28 bars are ~230,000
#: completions at a million actions (~150 ms); its last two, ~17,000 (~10 ms).
OLDER_BARS_FROM = 3600
RECENT_BARS = 2
OLDER_BARS_TTL = timedelta(hours=1)
#: The windows the tiles and the runs per definition offer.
TILE_WINDOWS = ("1h", "24h", "7d")
#: Statuses counted live (what is in flight now), and completed in the window.
LIVE_STATUSES = (status.PENDING, status.PERFORMING, status.COMPENSATING)
COMPLETED_STATUSES = CHART_STATUSES
#: Approvals listed with their forms, and failed trees listed, in "Needs attention".
WAITING_SHOWN = 10
FAILED_SHOWN = 5
#: The longest note an operator may give with an approval (the action page's limit).
MAX_NOTE = 2000
#: The longest JSON payload an approval from the overview carries.
MAX_PAYLOAD = 20_000


# --- an in-process cache per app ----------------------------------------------------------------


class Cache:
    """Values computed at most once per time-to-live, by the engine's clock (tests move it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[Hashable, tuple[datetime, Any]] = {}

    def get(
        self,
        key: Hashable,
        ttl: timedelta,
        compute: Callable[[], T],
        still: Callable[[T], bool] | None = None,
    ) -> tuple[T, datetime]:
        """The value and when it was computed (again when ``still`` says it no longer holds)."""
        now = clock.now()
        with self._lock:
            hit = self._items.get(key)
        if hit is not None and hit[0] <= now < hit[0] + ttl and (still is None or still(hit[1])):
            return hit[1], hit[0]
        value = compute()
        with self._lock:
            self._items[key] = (now, value)
        return value, now

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def cache() -> Cache:
    found = current_app.extensions.get("stepwise_overview_cache")
    if found is None:
        found = current_app.extensions.setdefault("stepwise_overview_cache", Cache())
    assert isinstance(found, Cache)
    return found


# --- views -------------------------------------------------------------------------------------------


@bp.get("/")
def index() -> Response:
    stuck = stuck_context()
    # The panels share some names (the window, the count of waiting approvals): one context.
    context = {
        **attention_context(stuck),
        **counts(),
        **chart_context(),
        **waiting_context(),
        **stuck,
        **stats_context(),
        "scan": q.SCAN,
    }
    return render("overview/index.html", "overview/_counts.html", **context)


@bp.get("/overview/counts")
def counts_fragment() -> Response:
    """The counts alone: the fragment polls this while the tab is visible."""
    return render("overview/_counts.html", **counts())


@bp.get("/overview/attention")
def attention_fragment() -> Response:
    """What needs a person, alone: it polls this while the tab is visible."""
    stuck = stuck_context()
    return render("overview/_attention.html", **attention_context(stuck), **stuck)


@bp.get("/overview/runs")
def stats_fragment() -> Response:
    """Runs per definition in the window alone (the window links ask for it)."""
    return render("overview/_runs.html", **stats_context())


@bp.post("/overview/approve/<int:action_id>")
@requires(users.OPERATOR)
def approve(action_id: int) -> Response:
    """Approve a waiting outbound action from the overview: ``engine.commands.approve``,
    audited as on the action page; answered with the refreshed "Needs attention"."""
    result = decide(commands.approve, action_id)
    return decided(action_id, result, f"Action {action_id} was approved: it succeeded.")


@bp.post("/overview/reject/<int:action_id>")
@requires(users.OPERATOR)
def reject(action_id: int) -> Response:
    """Reject a waiting outbound action from the overview (it fails)."""
    result = decide(commands.reject, action_id)
    return decided(action_id, result, f"Action {action_id} was rejected: it failed.")


def decide(command: Callable[..., CommandResult], action_id: int) -> CommandResult:
    note = (request.form.get("note") or "").strip() or None
    if note is not None and len(note) > MAX_NOTE:
        abort(400, description=f"The note is at most {MAX_NOTE:,} characters, so nothing was changed.")
    payload = schemas.form_json(request.form.get("payload"), MAX_PAYLOAD, "nothing was changed")
    user = current_user()
    return command(
        action_id, by=user.name if user else None, note=note, payload=payload, cause=history.OPERATOR
    )


def decided(action_id: int, result: CommandResult, done: str) -> Response:
    if result.reason == "not_found":
        abort(404, description=f"There is no action {action_id}, so nothing was changed.")
    if result and result.reason in ("consumed", "kept"):
        verb = "approved" if "approve" in done else "rejected"
        message = f"Action {action_id} was {verb}: its step carries on with the answer."
    elif result:
        message = done
    elif result.reason == "not_outbound":
        message = f"Action {action_id} is not outbound: it completes on its own. Nothing was changed."
    else:
        message = f"Action {action_id} is already completed: nothing was changed."
    db.session.expire_all()
    stuck = stuck_context()
    return command_response(
        message,
        ok=bool(result),
        fragment="overview/_attention.html",
        redirect_to=url_for("overview.index"),
        **attention_context(stuck),
        **stuck,
    )


@bp.get("/overview/throughput")
def throughput_fragment() -> Response:
    """The chart alone (its window links and its polling ask for it)."""
    return render("overview/_throughput.html", **chart_context())


@bp.get("/overview/waiting")
def waiting_fragment() -> Response:
    return render("overview/_waiting.html", **waiting_context(), scan=q.SCAN)


def counts() -> dict[str, Any]:
    """Live counts (capped, per request) and the completions of the window (its chart's
    figures, shared with the chart's cache)."""
    session: Any = db.session
    window = chart_window()
    chart = chart_context(window)["chart"]
    succeeded = chart.totals.get(status.SUCCEEDED, 0)
    ran = succeeded + chart.failures
    return {
        "live": {state: queries.status_count(session, state) for state in LIVE_STATUSES},
        "waiting_count": queries_waiting.waiting_count(session),
        "completed": {state: chart.totals.get(state, 0) for state in COMPLETED_STATUSES},
        "success_rate": succeeded / ran if ran else None,
        "completed_at": chart.computed_at,
        "completed_older_at": chart.older_at,
        "window": window,
        "tile_windows": [WINDOWS[key] for key in TILE_WINDOWS],
        "lanes": queries.lane_count(session),
        "achievements": queries.achievement_count(session),
    }


# --- needs attention -------------------------------------------------------------------------


def attention_context(stuck: dict[str, Any]) -> dict[str, Any]:
    """What a person must act on, read per request (nothing here is cached but the stuck
    actions, which share their panel's 15 s): an approval listed at once."""
    session: Any = db.session
    waiting, waiting_total = queries_waiting.waiting_for_people(session, limit=WAITING_SHOWN)
    failed, failed_count = q.failed_roots(session, limit=FAILED_SHOWN)
    undoing, undoing_count = queries_compensations.failed_compensations(session, limit=FAILED_SHOWN)
    user = current_user()
    return {
        "waiting": waiting,
        "waiting_total": waiting_total,
        "signal_waits": queries_waiting.signal_waits(session, [a.id for a in waiting]),
        "failed": failed,
        "failed_count": failed_count,
        "compensations_failed": undoing,
        "compensations_failed_count": undoing_count,
        "causes": queries_actions.causes(session, failed),
        "stuck_ids": ",".join(str(item.action.id) for item in stuck["stuck"]),
        "can_command": user is not None and user.can(users.OPERATOR),
        "now": clock.now(),
    }


# --- runs per definition ---------------------------------------------------------------------


def definition_stats(window: Window) -> tuple[tuple[list[q.DefinitionStats], bool], datetime]:
    """Runs per definition in ``window``, computed at most once per the window's TTL (the
    catalog shares it)."""

    def compute() -> tuple[list[q.DefinitionStats], bool]:
        session: Any = db.session
        return q.definition_stats(session, clock.now() - window.span)

    return cache().get(("stats", window.key), window.ttl, compute)


def stats_context() -> dict[str, Any]:
    window = chart_window()
    (stats, sample_full), at = definition_stats(window)
    return {
        "stats": stats,
        "stats_sample_full": sample_full,
        "stats_at": at,
        "scan": q.SCAN,
        "window": window,
        "tile_windows": [WINDOWS[key] for key in TILE_WINDOWS],
    }


def chart_window() -> Window:
    return WINDOWS.get(request.args.get("window", ""), WINDOWS[DEFAULT_WINDOW])


def chart_context(window: Window | None = None) -> dict[str, Any]:
    window = window or chart_window()
    session: Any = db.session
    store = cache()
    now = clock.now()
    if window.seconds < OLDER_BARS_FROM or window.buckets <= RECENT_BARS:
        buckets, at = store.get(
            ("chart", window.key),
            window.ttl,
            lambda: q.throughput(session, clock.now(), window.buckets, window.seconds),
        )
        return {"chart": draw(window, buckets, at), "windows": WINDOWS.values()}
    # The older bars: ending where the last RECENT_BARS begin, so they are read again as
    # soon as a bar ends (a new bar begins), and at least once per OLDER_BARS_TTL.
    older_end = now - timedelta(seconds=RECENT_BARS * window.seconds)
    older, older_at = store.get(
        ("chart-older", window.key),
        OLDER_BARS_TTL,
        lambda: q.throughput(session, older_end, window.buckets - RECENT_BARS, window.seconds),
        still=lambda found: found[-1].start <= older_end < found[-1].end,
    )
    recent, at = store.get(
        ("chart", window.key),
        window.ttl,
        lambda: q.throughput(session, clock.now(), RECENT_BARS, window.seconds),
        still=lambda found: found[-1].start <= now < found[-1].end,
    )
    chart = replace(draw(window, [*older, *recent], at), older_at=older_at, recent_bars=RECENT_BARS)
    return {"chart": chart, "windows": WINDOWS.values()}


# --- oldest pending per lane, stuck actions --------------------------------------------------------


def waiting_context() -> dict[str, Any]:
    def compute() -> tuple[list[q.LaneWait], bool]:
        session: Any = db.session
        return q.oldest_pending_by_lane(session)

    (waits, sample_full), at = cache().get(("waiting",), TTL["waiting"], compute)
    return {"waits": waits, "waits_sample_full": sample_full, "waits_at": at, "waits_top": q.TOP}


def stuck_settings() -> dict[str, Any]:
    config = current_app.config
    return {
        "factor": float(config.get("STEPWISE_STUCK_FACTOR", 3)),
        "floor": timedelta(seconds=float(config.get("STEPWISE_STUCK_FLOOR_SECONDS", 60))),
        "outbound_after": timedelta(minutes=float(config.get("STEPWISE_STUCK_OUTBOUND_MINUTES", 30))),
    }


def stuck_context() -> dict[str, Any]:
    settings = stuck_settings()
    store = cache()

    def usual(session: Any, name: str) -> timedelta | None:
        value, _ = store.get(("usual", name), TTL["usual"], lambda: q.usual_duration(session, name))
        return value

    def compute() -> tuple[list[q.Stuck], bool]:
        session: Any = db.session
        performing = q.performing_sample(session)
        names = {a.name for a in performing if not a.outbound}
        durations = {name: usual(session, name) for name in sorted(names)}
        found = q.stuck_actions(performing, durations, clock.now(), **settings)
        return found, len(performing) >= q.SCAN

    (found, sample_full), at = store.get(("stuck",), TTL["stuck"], compute)
    return {
        "stuck": found[: q.TOP],
        "stuck_total": len(found),
        "stuck_sample_full": sample_full,
        "stuck_at": at,
        "stuck_settings": settings,
        "stuck_scan": q.SCAN,
    }
