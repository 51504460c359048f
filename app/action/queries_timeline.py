"""The read model of the action page beside its tree: the timeline of its steps and
children, its history, each attempt's error, and each run and attempt with its start and
end (read back from the history, since a retry starts the action's clock again). It only
reads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select

from engine.models import ActionEvent, Invocation

from .queries_tree import ERROR_EVENTS, AnySession
from .tree_model import StepNode, Tree

# --- the timeline ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bar:
    """A row of the timeline: offsets and widths in percent of the timeline's span."""

    kind: str  # "step" or "child"
    label: str
    status: str
    start: datetime | None
    end: datetime | None
    left: float
    width: float
    running: bool
    queued: float = 0.0  # the part before it started (pending), in percent, left of ``left``
    action_id: int | None = None


@dataclass(frozen=True, slots=True)
class Timeline:
    origin: datetime
    end: datetime
    bars: list[Bar]
    more: int = 0

    @property
    def span_seconds(self) -> float:
        return max((self.end - self.origin).total_seconds(), 0.0)


def timeline(
    tree: Tree, action_id: int, now: datetime, limit: int = 200, step_names: dict[int, str] | None = None
) -> Timeline | None:
    """The steps of ``action_id`` and the children of each, as bars relative to the start
    of the root (its creation when it has not started). Steps are labelled with their
    ``step_names`` (step id -> declared name), else "step N"."""
    names = step_names or {}
    node = tree.nodes.get(action_id)
    root = tree.root
    origin = root.started_at or root.created_at
    if node is None or origin is None:
        return None
    spans: list[tuple[str, str, str, datetime | None, datetime | None, datetime | None, int | None]] = []
    for step in node.steps:
        spans.append(
            (
                "step",
                names.get(step.id) or f"step {step.number}",
                step.status,
                None,
                step.started_at,
                step.completed_at,
                None,
            )
        )
        for child_id in step.children:
            child = tree.nodes[child_id]
            label = f"#{child.id} {child.name}"
            spans.append(
                (
                    "child",
                    label,
                    child.status,
                    child.created_at,
                    child.started_at,
                    child.completed_at,
                    child.id,
                )
            )
    if not spans:
        return None
    more = max(0, len(spans) - limit)
    spans = spans[:limit]
    ends = [s[5] or now for s in spans] + [origin]
    end = max(ends)
    total = max((end - origin).total_seconds(), 1e-6)

    def pct(t: datetime | None) -> float:
        if t is None:
            return 0.0
        return min(100.0, max(0.0, (t - origin).total_seconds() / total * 100))

    bars = []
    for kind, label, state, queued_at, started, completed, bar_action in spans:
        begin = started or queued_at
        left = pct(started) if started else pct(queued_at)
        right = pct(completed or now) if begin is not None else left
        queued = max(0.0, pct(started) - pct(queued_at)) if started and queued_at else 0.0
        bars.append(
            Bar(
                kind=kind,
                label=label,
                status=state,
                start=started,
                end=completed,
                left=left,
                width=max(right - left, 0.4),
                running=completed is None,
                queued=queued,
                action_id=bar_action,
            )
        )
    return Timeline(origin, end, bars, more)


# --- history and errors --------------------------------------------------------------------


def history(
    session: AnySession,
    *,
    action_id: int,
    tree_id: int,
    whole_tree: bool,
    before: int | None,
    limit: int = 100,
) -> tuple[list[ActionEvent], int | None]:
    """The newest ``limit`` events of the action (or of its whole tree) older than event
    ``before``, newest first, and the id to pass as ``before`` for the next page (keyset)."""
    query = select(ActionEvent)
    if whole_tree:
        query = query.where(ActionEvent.root_id == tree_id)
    else:
        query = query.where(ActionEvent.action_id == action_id)
    if before is not None:
        query = query.where(ActionEvent.id < before)
    events = list(session.scalars(query.order_by(ActionEvent.id.desc()).limit(limit + 1)))
    older: int | None = events[limit - 1].id if len(events) > limit else None
    return events[:limit], older


@dataclass(frozen=True, slots=True)
class AttemptError:
    event: ActionEvent

    @property
    def data(self) -> dict[str, Any]:
        return self.event.data or {}

    @property
    def error_class(self) -> str:
        return str(self.data.get("error_class", ""))

    @property
    def message(self) -> str:
        return str(self.data.get("error_message", ""))

    @property
    def traceback(self) -> str | None:
        value = self.data.get("traceback")
        return str(value) if value else None


def attempt_errors(events: list[ActionEvent]) -> list[AttemptError]:
    """Every error recorded in the action's history, oldest first: each failed attempt of a
    step, a failed step, a failed callback, a child refused before admission, and the
    completion that carried an error."""
    return [AttemptError(e) for e in events if e.event in ERROR_EVENTS and (e.data or {}).get("error_class")]


def errors_and_runs(
    session: AnySession, action_id: int, steps: list[StepNode], limit: int = 1000
) -> tuple[list[AttemptError], Runs]:
    """The action's errors (``attempt_errors``) and its runs and attempts (``runs``), from
    one query of its history: the events of those kinds, at most ``limit``."""
    events = list(
        session.scalars(
            select(ActionEvent)
            .where(ActionEvent.action_id == action_id, ActionEvent.event.in_(ERROR_EVENTS + RUN_EVENTS))
            .order_by(ActionEvent.id)
            .limit(limit)
        )
    )
    return attempt_errors(events)[:200], runs(events, steps)


def invocation_actions(session: AnySession, events: list[ActionEvent]) -> dict[int, int]:
    """The action each invocation mentioned by ``events`` became (invocation id -> action
    id), for the history's links: one query for the page of events."""
    ids = sorted({e.invocation_id for e in events if e.invocation_id is not None})
    if not ids:
        return {}
    rows = session.execute(
        select(Invocation.id, Invocation.action_id).where(
            Invocation.id.in_(ids), Invocation.action_id.is_not(None)
        )
    )
    return {invocation_id: action_id for invocation_id, action_id in rows}


# --- runs and attempts -----------------------------------------------------------------------

#: The events that start or end a run of the action or an attempt of one of its steps.
RUN_EVENTS = (
    "started",
    "completed",
    "skipped",
    "step_started",
    "attempt_failed",
    "step_failed",
    "step_reopened",
)


@dataclass(frozen=True, slots=True)
class Span:
    """A run of the action (``number`` 1 = the first) or an attempt of a step body: from
    ``start`` (for an attempt after a failure: when it was due) to ``end`` (None: not yet),
    and how it ended (``outcome``: a status, or None while it runs)."""

    number: int
    start: datetime | None
    end: datetime | None
    outcome: str | None
    error_class: str | None = None
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class Runs:
    runs: list[Span]
    #: step id -> its attempts, oldest first.
    attempts: dict[int, list[Span]]
    #: The operator's skip that completed the last run, if it was skipped.
    skipped: ActionEvent | None = None

    @property
    def first_start(self) -> datetime | None:
        return self.runs[0].start if self.runs else None


def runs(events: list[ActionEvent], steps: list[StepNode]) -> Runs:
    """Each run of the action (from each "started" to its "completed") and each attempt of
    each of its ``steps``, from its history ``events``, oldest first."""
    spans: list[Span] = []
    started: datetime | None = None
    skipped: ActionEvent | None = None
    for e in events:
        if e.event == "skipped":
            skipped = e
        elif e.event == "started":
            started, skipped = e.at, None
        elif e.event == "completed" and started is not None:
            spans.append(Span(len(spans) + 1, started, e.at, str((e.data or {}).get("status") or "")))
            started = None
    if started is not None:
        spans.append(Span(len(spans) + 1, started, None, None))
    by_step = {s.id: s for s in steps}
    attempts: dict[int, list[Span]] = {s.id: [] for s in steps}
    # step id -> (number, start) of the attempt under way
    current: dict[int, tuple[int, datetime | None]] = {}
    for e in events:
        step_id, data = e.step_id, e.data or {}
        if step_id not in by_step:
            continue
        if e.event == "step_started":
            current[step_id] = (1, e.at)
        elif e.event == "step_reopened" and data.get("attempt"):
            current[step_id] = (int(data["attempt"]), e.at)
        elif e.event in ("attempt_failed", "step_failed"):
            number, start = current.pop(step_id, (int(data.get("attempt") or by_step[step_id].attempt), None))
            number = int(data.get("attempt") or number)
            attempts[step_id].append(
                Span(number, start, e.at, "failed", data.get("error_class"), data.get("error_message"))
            )
            if e.event == "attempt_failed":
                current[step_id] = (number + 1, _parse(data.get("next_attempt_at")))
    for step_id, (number, start) in current.items():
        step = by_step[step_id]
        ran = step.performed_at is not None and (start is None or step.performed_at >= start)
        attempts[step_id].append(
            Span(number, start, step.performed_at if ran else None, "ran" if ran else None)
        )
    return Runs(spans, attempts, skipped)


def _parse(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None
