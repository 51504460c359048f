"""The read model of the actions list, the failures grouped by error and the bulk commands'
progress. It only reads (the overview's is ``app.overview.queries``).

Every query here is bounded, so a page costs about the same with a thousand actions or a
hundred million:

- the list is a keyset page (``WHERE id < :before ORDER BY id DESC LIMIT n``) on the index
  that matches the filter, and its count stops at ``queries.CAP``; the errors of a page's
  failed roots are one query on ``ix_stepwise_actions_tree``;
- the failures grouped by error read the ``SCAN`` newest actions that raised
  (``ix_stepwise_actions_error_class`` with ``ix_stepwise_actions_status_name``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from engine import registry, status
from engine.commands import ActionFilter
from engine.models import Action, AuditEntry

from ..queries import CAP, Count, capped_count

#: Rows of one page of the actions list.
PAGE_SIZE = 50
#: How many rows a sample reads at most: the newest failures grouped by error here, the
#: oldest pending or performing actions and the newest completions on the overview.
SCAN = 10_000
#: Statuses of an action that ran and failed (what "failures" means on every page).
FAILURE_STATUSES = frozenset({status.FAILED, status.TIMED_OUT})


# --- the actions list ------------------------------------------------------------------------

#: The columns a row shows (never the traceback or the result payload), in ActionRow's order.
ROW_COLUMNS = (
    Action.id,
    Action.name,
    Action.actor_type,
    Action.actor_id,
    Action.status,
    Action.concurrency_key,
    Action.root,
    Action.root_id,
    Action.outbound,
    Action.arguments_json,
    Action.created_at,
    Action.started_at,
    Action.completed_at,
    Action.deadline_at,
    Action.error_class,
    # A row shows the start of the message; a whole one may be megabytes.
    func.substr(Action.error_message, 1, 500),
)


@dataclass(frozen=True)
class ActionRow:
    """An action as a row of a list: plain values, safe to cache and to render after the
    request's session is gone."""

    id: int
    name: str
    actor_type: str
    actor_id: str
    status: str
    concurrency_key: str
    root: bool
    root_id: int | None
    outbound: bool
    arguments: list[Any]
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    deadline_at: datetime | None
    error_class: str | None = None
    error_message: str | None = None

    @property
    def actor(self) -> str:
        return f"{self.actor_type}/{self.actor_id}"

    @property
    def tree_id(self) -> int:
        return self.root_id if self.root_id is not None else self.id

    @property
    def arguments_preview(self) -> str:
        """The arguments as JSON, cut at 80 characters."""
        text = json.dumps(self.arguments, ensure_ascii=False, default=str)
        return text if len(text) <= 80 else text[:79] + "…"

    def duration(self, now: datetime) -> timedelta | None:
        """How long it performed (so far, while performing); None before it started."""
        if self.started_at is None:
            return None
        return (self.completed_at or now) - self.started_at

    @property
    def error_name(self) -> str | None:
        """The error's class without its module (``WarehouseOffline``)."""
        return short_error(self.error_class)


def short_error(error_class: str | None) -> str | None:
    return error_class.rsplit(".", 1)[-1] if error_class else None


@dataclass(frozen=True)
class Cause:
    """Why a failed tree failed: the error of an action below its root that raised."""

    action_id: int
    name: str
    error_class: str
    error_message: str | None

    @property
    def error_name(self) -> str | None:
        return short_error(self.error_class)


def causes(session: Session, roots: Iterable[ActionRow]) -> dict[int, Cause]:
    """For the failed roots among ``roots`` that raised nothing themselves (their failure
    came up from below), the first error raised in their tree: one query on
    ``ix_stepwise_actions_tree`` for a page of roots."""
    ids = sorted({r.id for r in roots if r.root and r.status in FAILURE_STATUSES and not r.error_class})
    if not ids:
        return {}
    found: dict[int, Cause] = {}
    query = (
        select(
            Action.root_id,
            Action.id,
            Action.name,
            Action.error_class,
            func.substr(Action.error_message, 1, 500),
        )
        .where(
            Action.root_id.in_(ids),
            Action.status.in_(sorted(FAILURE_STATUSES)),
            Action.error_class.is_not(None),
        )
        .order_by(Action.root_id, Action.id)
    )
    for root_id, action_id, name, error_class, message in session.execute(query):
        found.setdefault(root_id, Cause(action_id, name, error_class, message))
    return found


def rows(session: Session, query: Select[Any]) -> list[ActionRow]:
    return [ActionRow(*row) for row in session.execute(query).all()]


def select_rows() -> Select[Any]:
    return select(*ROW_COLUMNS)


@dataclass(frozen=True)
class Page:
    """One keyset page of actions, newest first."""

    rows: list[ActionRow]
    #: Whether there are older (lower id) actions after this page, and newer ones before it.
    has_older: bool
    has_newer: bool

    @property
    def oldest_id(self) -> int | None:
        return self.rows[-1].id if self.rows else None

    @property
    def newest_id(self) -> int | None:
        return self.rows[0].id if self.rows else None


def list_page(
    session: Session,
    where: ActionFilter,
    *,
    before: int | None = None,
    after: int | None = None,
    size: int = PAGE_SIZE,
) -> Page:
    """The ``size`` newest actions matching ``where`` with an id below ``before`` (older), or
    the ``size`` oldest above ``after`` (the page newer than one seen), newest first."""
    query = select_rows().where(*where.conditions())
    if after is not None:
        found = rows(session, query.where(Action.id > after).order_by(Action.id).limit(size + 1))
        return Page(list(reversed(found[:size])), has_older=True, has_newer=len(found) > size)
    if before is not None:
        query = query.where(Action.id < before)
    found = rows(session, query.order_by(Action.id.desc()).limit(size + 1))
    return Page(found[:size], has_older=len(found) > size, has_newer=before is not None)


def matching_count(session: Session, where: ActionFilter, cap: int = CAP) -> Count:
    """How many actions match ``where``, reading at most ``cap + 1`` index entries."""
    ids: Any = where.select_ids()
    return capped_count(session, ids, cap)


def eligible_count(session: Session, where: ActionFilter, statuses: Iterable[str], cap: int = CAP) -> Count:
    """How many actions matching ``where`` are in one of ``statuses`` (what a bulk command
    would change), capped."""
    ids: Any = where.select_ids().where(Action.status.in_(sorted(statuses)))
    return capped_count(session, ids, cap)


def known_names() -> list[str]:
    """Action names of the registered definitions (for the filter's suggestions: a
    ``SELECT DISTINCT name`` would read the whole index)."""
    return sorted({name for (_cls, name) in registry.snapshot()[0]})


def known_actor_types() -> list[str]:
    return sorted({registry.type_name(cls) for (cls, _name) in registry.snapshot()[0]})


def bulk_entry(session: Session, entry_id: int) -> AuditEntry | None:
    """A bulk command's audit entry (with its progress), or None."""
    entry = session.get(AuditEntry, entry_id, populate_existing=True)
    if entry is None or not entry.command.startswith("bulk_"):
        return None
    return entry


# --- failures grouped by error -------------------------------------------------------------------


@dataclass(frozen=True)
class ErrorGroup:
    """The failed actions that raised one error class, among those read."""

    error_class: str
    count: int
    newest_id: int
    newest_at: datetime | None
    #: The newest one's message (its start).
    message: str | None
    #: Action names that raised it, the most frequent first (at most a few).
    names: tuple[str, ...] = ()

    @property
    def error_name(self) -> str | None:
        return short_error(self.error_class)


def failure_groups(
    session: Session, scan: int = SCAN, *, since: datetime | None = None
) -> tuple[list[ErrorGroup], bool]:
    """Failed and timed-out actions that raised an error, grouped by its class, the group
    with the newest failure first; and whether the ``scan`` newest failures read were not
    all there is (then the counts are among those). Reads at most ``scan`` entries of
    ``ix_stepwise_actions_error_class`` (the actions with an error, by id). With ``since``,
    only the actions created since then (a time-range preset, as the list filters them)."""
    where = [Action.error_class.is_not(None), Action.status.in_(sorted(FAILURE_STATUSES))]
    if since is not None:
        # Ids grow with creation times: the first action created since then (one probe of
        # ix_stepwise_actions_created_at) bounds the ids to read, so the scan stops at the
        # window's start instead of reading every older failure to find none.
        first = session.scalar(
            select(Action.id).where(Action.created_at >= since).order_by(Action.created_at).limit(1)
        )
        if first is None:
            return [], False
        where += [Action.id >= first, Action.created_at >= since]
    sample = (
        select(Action.id, Action.error_class, Action.name)
        .where(*where)
        .order_by(Action.id.desc())
        .limit(scan)
        .subquery()
    )
    grouped = session.execute(
        select(sample.c.error_class, func.count().label("n"), func.max(sample.c.id).label("newest"))
        .group_by(sample.c.error_class)
        .order_by(func.max(sample.c.id).desc())
    ).all()
    read = sum(int(row.n) for row in grouped)
    if not grouped:
        return [], False
    newest = {
        row.id: row
        for row in session.execute(
            select(
                Action.id, Action.completed_at, func.substr(Action.error_message, 1, 500).label("message")
            ).where(Action.id.in_([row.newest for row in grouped]))
        )
    }
    names: dict[str, dict[str, int]] = {}
    for error_class, name, n in session.execute(
        select(sample.c.error_class, sample.c.name, func.count()).group_by(
            sample.c.error_class, sample.c.name
        )
    ):
        names.setdefault(error_class, {})[name] = int(n)
    groups = []
    for row in grouped:
        first = newest.get(row.newest)
        by_name = names.get(row.error_class, {})
        groups.append(
            ErrorGroup(
                error_class=row.error_class,
                count=int(row.n),
                newest_id=int(row.newest),
                newest_at=first.completed_at if first is not None else None,
                message=first.message if first is not None else None,
                names=tuple(sorted(by_name, key=lambda k: (-by_name[k], k))[:3]),
            )
        )
    return groups, read >= scan
