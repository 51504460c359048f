"""The read model of achievements: the checksum of the last success under each
``checksum_key``, the action that granted it, and the invocations it skipped since. It only
reads.

Skipped invocations are found by the key the engine stores on them when an achievement
skips them (``Invocation.checksum_key``, indexed where it is set): the history's
``invocation_skipped`` events do not carry the key, and a key computed by a callable could
not be recomputed from the actor and arguments without running user code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from engine.models import Achievement, Action, Invocation, Step

from ..queries import keyset_page

PAGE = 50
#: Skips shown per achievement in the list (the achievement's page shows a page of them).
SKIPS_SHOWN = 3
#: A "contains" search reads at most this many keys per page, in key order, so that a page
#: costs the same on a million achievements; the next page carries on where it stopped.
SCAN = 20_000
PREFIX = "prefix"
CONTAINS = "contains"


@dataclass
class Skip:
    """An invocation skipped by an achievement, and the action whose step invoked it (None:
    invoked from outside a tree, by ``later`` or ``now``)."""

    invocation: Invocation
    parent: Action | None


@dataclass
class Row:
    achievement: Achievement
    granted_by: Action | None
    skips: list[Skip] = field(default_factory=list)
    more_skips: bool = False

    @property
    def key(self) -> str:
        return self.achievement.checksum_key


@dataclass
class Page:
    rows: list[Row]
    #: The key to continue after, when there may be more.
    next_after: str | None
    #: A contains search stopped at its scan window: the next page searches on from here.
    searched_to: str | None = None


def search(
    session: Session,
    *,
    q: str = "",
    mode: str = PREFIX,
    after: str | None = None,
    limit: int | None = None,
    scan: int | None = None,
) -> Page:
    """A page of achievements in key order: all of them, those whose key starts with ``q``
    (a range of the unique index), or those whose key contains ``q`` (any case)."""
    limit = limit or PAGE
    if q and mode == CONTAINS:
        return _contains(session, q, after, limit, scan or SCAN)
    found, next_key = keyset_page(
        session, Achievement, Achievement.checksum_key, prefix=q or "", after=after, limit=limit
    )
    return Page(rows(session, found), next_key)


def _contains(session: Session, q: str, after: str | None, limit: int, scan: int) -> Page:
    window_query = (
        select(Achievement.id, Achievement.checksum_key).order_by(Achievement.checksum_key).limit(scan)
    )
    if after is not None:
        window_query = window_query.where(Achievement.checksum_key > after)
    window = window_query.subquery()
    found = list(
        session.scalars(
            select(Achievement)
            .join(window, window.c.id == Achievement.id)
            .where(func.lower(window.c.checksum_key).contains(q.lower(), autoescape=True))
            .order_by(Achievement.checksum_key)
            .limit(limit + 1)
        )
    )
    if len(found) > limit:
        found = found[:limit]
        return Page(rows(session, found), found[-1].checksum_key)
    scanned, last = session.execute(select(func.count(), func.max(window.c.checksum_key))).one()
    if scanned >= scan and last is not None:
        return Page(rows(session, found), last, searched_to=last)
    return Page(rows(session, found), None)


def find(session: Session, key: str) -> Row | None:
    achievement = session.scalars(select(Achievement).where(Achievement.checksum_key == key)).one_or_none()
    return rows(session, [achievement])[0] if achievement is not None else None


def rows(session: Session, achievements: list[Achievement]) -> list[Row]:
    """Each achievement with its granting action and its latest skips (three queries)."""
    if not achievements:
        return []
    action_ids = {a.action_id for a in achievements if a.action_id is not None}
    actions = {a.id: a for a in session.scalars(select(Action).where(Action.id.in_(action_ids)))}
    skips = _latest_skips(session, achievements)
    result = []
    for achievement in achievements:
        latest = skips.get(achievement.checksum_key, [])
        result.append(
            Row(
                achievement,
                actions.get(achievement.action_id) if achievement.action_id is not None else None,
                latest[:SKIPS_SHOWN],
                len(latest) > SKIPS_SHOWN,
            )
        )
    return result


def _latest_skips(session: Session, achievements: list[Achievement]) -> dict[str, list[Skip]]:
    """Up to SKIPS_SHOWN + 1 invocations each achievement skipped since it was granted, newest
    first: one range of ix_stepwise_invocations_skipped per key."""
    rank = (
        func.row_number()
        .over(partition_by=Invocation.checksum_key, order_by=Invocation.id.desc())
        .label("rank")
    )
    ranked = (
        select(Invocation.id, rank)
        .join(Achievement, Achievement.checksum_key == Invocation.checksum_key)
        .where(
            Invocation.checksum_key.is_not(None),
            Invocation.checksum_key.in_([a.checksum_key for a in achievements]),
            Invocation.settled_at >= Achievement.created_at,
        )
        .subquery()
    )
    found = session.execute(
        select(Invocation, Action)
        .join(ranked, ranked.c.id == Invocation.id)
        .outerjoin(Step, Step.id == Invocation.parent_step_id)
        .outerjoin(Action, Action.id == Step.action_id)
        .where(ranked.c.rank <= SKIPS_SHOWN + 1)
        .order_by(Invocation.id.desc())
    )
    skips: dict[str, list[Skip]] = {}
    for invocation, parent in found:
        skips.setdefault(invocation.checksum_key or "", []).append(Skip(invocation, parent))
    return skips


def skips(
    session: Session, achievement: Achievement, *, before: int | None = None, limit: int | None = None
) -> tuple[list[Skip], int | None]:
    """A page of the invocations ``achievement`` skipped since it was granted, newest first,
    and the id to continue before."""
    limit = limit or PAGE
    query = (
        select(Invocation, Action)
        .outerjoin(Step, Step.id == Invocation.parent_step_id)
        .outerjoin(Action, Action.id == Step.action_id)
        .where(
            Invocation.checksum_key == achievement.checksum_key,
            Invocation.settled_at >= achievement.created_at,
        )
        .order_by(Invocation.id.desc())
        .limit(limit + 1)
    )
    if before is not None:
        query = query.where(Invocation.id < before)
    found = [Skip(invocation, parent) for invocation, parent in session.execute(query)]
    more = len(found) > limit
    found = found[:limit]
    return found, found[-1].invocation.id if more and found else None
