"""The read model of the action page beside its tree: the timeline of its steps and
children, its history, and each attempt's error. It only reads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select

from engine.models import ActionEvent

from .queries_tree import ERROR_EVENTS, AnySession
from .tree_model import Tree

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


def timeline(tree: Tree, action_id: int, now: datetime, limit: int = 200) -> Timeline | None:
    """The steps of ``action_id`` and the children of each, as bars relative to the start
    of the root (its creation when it has not started)."""
    node = tree.nodes.get(action_id)
    root = tree.root
    origin = root.started_at or root.created_at
    if node is None or origin is None:
        return None
    spans: list[tuple[str, str, str, datetime | None, datetime | None, datetime | None, int | None]] = []
    for step in node.steps:
        spans.append(
            ("step", f"step {step.number}", step.status, None, step.started_at, step.completed_at, None)
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


def attempt_errors(session: AnySession, action_id: int, limit: int = 200) -> list[AttemptError]:
    """Every error recorded in the action's history, oldest first: each failed attempt of a
    step, a failed step, a failed callback, a child refused before admission, and the
    completion that carried an error."""
    events = session.scalars(
        select(ActionEvent)
        .where(ActionEvent.action_id == action_id, ActionEvent.event.in_(ERROR_EVENTS))
        .order_by(ActionEvent.id)
        .limit(limit)
    )
    return [AttemptError(e) for e in events if (e.data or {}).get("error_class")]
