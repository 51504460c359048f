"""The inbox: sending signals to an action, and matching them to the steps that wait.

Sending records the signal (refused when the action is finished) and hands it to the
oldest open wait of the action for its name; a signal nobody waits for yet stays in the
inbox, oldest first. A wait and a signal made at the same moment may each miss the other's
row in flight, so both sides match again after their commit (the ``MATCH_SIGNALS``
message): whichever commits last sees both. Consuming is one guarded write on each row
(the signal and the wait still open), so a signal is consumed at most once and a wait
takes at most one signal.

Locks follow a child's completion: the waits (invocations), then the signals, then the
waiting step (its counter), then, if the step is done, its action's lane.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from . import arguments, broker, clock, group_commit, history, registry, status
from .action import Action
from .completion import conclude
from .errors import ArgumentError, SignalRefused
from .invocation import Invocation, invoke
from .signal import NAME_LENGTH, SIGNAL_WAIT, Signal
from .step import Step

APPROVED, REJECTED = "approved", "rejected"
#: The kind of the invocation that starts a reminder when an approval is late.
REMIND = "remind"

#: An action by id, or the newest action of this name on this actor (as ``complete``
#: finds its action): ``(actor, name)``, or ``(actor_type, actor_id, name)`` as stored.
Target = Action | int | tuple[Any, str] | tuple[str, str, str]


@dataclass(frozen=True)
class Received:
    """A signal as the step after its wait sees it."""

    id: int
    name: str
    payload: Any
    sent_by: str | None
    note: str | None
    sent_at: datetime


@dataclass(frozen=True)
class WaitFor:
    """A step's wait for signals, before it is recorded: any of ``names``, until
    ``timeout``; ``reminder`` (an action name) is started once ``remind_after`` passed
    without an answer."""

    names: list[str]
    timeout: timedelta | None = None
    remind_after: timedelta | None = None
    reminder: str | None = None


def record_waits(session: Session, action: Action, step: Step, waits: list[WaitFor]) -> list[Invocation]:
    """Record a body's waits for signals (the step waits on each), their deadlines and
    reminders; the inbox is matched against them once this commits."""
    if not waits:
        return []
    now = clock.now()
    rows = [
        Invocation(
            kind="wait",
            actor_type=action.actor_type,
            actor_id=action.actor_id,
            name=SIGNAL_WAIT,
            arguments_json=wait.names,
            parent_step_id=step.id,
            due_at=now + wait.timeout if wait.timeout is not None else None,
            created_at=now,
        )
        for wait in waits
    ]
    session.add_all(rows)
    session.flush()
    for row, wait in zip(rows, waits, strict=True):
        if wait.timeout is not None:
            broker.enqueue(session, broker.WAIT_OVER, row.id, delay=wait.timeout)
        if wait.reminder is not None and wait.remind_after is not None:
            _remind_later(session, action, row, wait.reminder, now + wait.remind_after)
    broker.enqueue(session, broker.MATCH_SIGNALS, action.id)
    waiting = [{"invocation_id": w.id, "names": w.arguments_json, "until": _iso(w.due_at)} for w in rows]
    history.record(session, action, "waiting_for_signals", step_id=step.id, waits=waiting)
    return rows


def _remind_later(session: Session, action: Action, wait: Invocation, reminder: str, at: datetime) -> None:
    """A reminder is an invocation of kind "remind" (not waited on by the step): at ``at``,
    if ``wait`` is still open, it starts ``reminder`` on the actor with the action's id."""
    request = Invocation(
        kind=REMIND,
        actor_type=action.actor_type,
        actor_id=action.actor_id,
        name=reminder,
        arguments_json=[action.id, wait.id],
        due_at=at,
        created_at=clock.now(),
    )
    session.add(request)
    session.flush()
    broker.enqueue(session, broker.REMIND, request.id, delay=at - clock.now())


def remind(session: Session, request_id: int) -> timedelta | None:
    """Carry out a reminder once: start its action if the approval it is for is still not
    answered, else settle it as not needed. Early: how long until it is due."""
    request = session.scalars(
        select(Invocation)
        .where(Invocation.id == request_id, Invocation.kind == REMIND)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()
    if request is None or request.settled_at is not None:
        return None
    if request.due_at is not None and clock.now() < request.due_at:
        return request.due_at - clock.now()
    action_id, wait_id = request.arguments_json
    wait = session.get(Invocation, wait_id)
    action = session.get(Action, action_id)
    request.settled_at = clock.now()
    if wait is None or wait.concluded_at is not None or action is None:
        request.outcome = "not_needed"
        return None
    actor = registry.load_actor(session, request.actor_type, request.actor_id)
    reminded = invoke(session, actor, request.name, [action_id])
    request.outcome = "reminded"
    history.record(
        session, action, "reminded", invocation_id=reminded.id, reminder=request.name, wait_id=wait_id
    )
    return None


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def check_name(name: str) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_LENGTH:
        raise ArgumentError(
            f"a signal name is a non-empty string of at most {NAME_LENGTH} characters, not {name!r}"
        )
    return name


def send(
    session: Session,
    target: Target,
    name: str,
    payload: Any = None,
    *,
    by: str | None = None,
    note: str | None = None,
    key: str | None = None,
) -> Signal:
    """Record signal ``name`` for ``target`` in ``session``'s transaction and give it to a
    waiting step if one waits for it. A second send with the same ``key`` returns the first
    signal and changes nothing. ``SignalRefused`` when the action does not exist or is
    finished."""
    check_name(name)
    stored = arguments.dump(payload)
    action = _find(session, target)
    if key is not None:
        sent = session.scalars(
            select(Signal).where(Signal.action_id == action.id, Signal.delivery_key == key)
        ).one_or_none()
        if sent is not None:
            return sent
    if action.status not in status.INCOMPLETE:
        raise SignalRefused(
            f"action {action.id} ({action.name} on {action.actor_type}/{action.actor_id}) is "
            f"{action.status}: a finished action takes no signals, and {name!r} was not recorded",
            "finished",
        )
    signal = Signal(
        action_id=action.id,
        name=name,
        payload=stored,
        sent_by=by,
        note=note,
        delivery_key=key,
        created_at=clock.now(),
    )
    try:
        with session.begin_nested():
            session.add(signal)
            session.flush()
    except IntegrityError:  # the same key sent at the same moment: the other one is the signal
        found = session.scalars(
            select(Signal).where(Signal.action_id == action.id, Signal.delivery_key == key)
        ).one_or_none()
        if found is None:
            raise
        return found
    history.record(
        session, action, "signal_received", cause=history.CALLER, by=by, signal_id=signal.id, name=name
    )
    match(session, action.id)
    if signal.consumed_at is None:
        broker.enqueue(session, broker.MATCH_SIGNALS, action.id)
    return signal


def _find(session: Session, target: Target) -> Action:
    if isinstance(target, tuple):
        if len(target) == 3:
            actor_type, actor_id, action_name = target
        else:
            actor, action_name = target
            actor_type, actor_id = registry.actor_ref(actor)
        found = session.scalars(
            select(Action)
            .where(Action.actor_type == actor_type, Action.actor_id == actor_id, Action.name == action_name)
            .order_by(Action.status.not_in(sorted(status.INCOMPLETE)), Action.id.desc())
            .limit(1)
            .execution_options(populate_existing=True)
        ).first()
        described = f"{action_name} on {actor_type}/{actor_id}"
    else:
        action_id = target.id if isinstance(target, Action) else target
        found = session.get(Action, action_id, populate_existing=True) if _is_id(action_id) else None
        described = f"action {action_id}"
    if found is None:
        raise SignalRefused(f"{described} does not exist: no signal was recorded", "not_found")
    return found


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


_WAITING = (
    select(Invocation)
    .join(Step, Step.id == Invocation.parent_step_id)
    .where(
        Step.action_id == bindparam("action_id"),
        Invocation.kind == "wait",
        Invocation.name == SIGNAL_WAIT,
        Invocation.concluded_at.is_(None),
    )
    .order_by(Invocation.id)
)
_OPEN_WAITS = _WAITING.with_for_update(of=Invocation).execution_options(populate_existing=True)
_INBOX = (
    select(Signal)
    .where(Signal.action_id == bindparam("action_id"), Signal.consumed_at.is_(None))
    .order_by(Signal.id)
    .with_for_update()
    .execution_options(populate_existing=True)
)


def waited_for(session: Session, action_id: int) -> set[str]:
    """The names the action's open waits wait for (without locking them)."""
    rows = session.scalars(_WAITING, {"action_id": action_id})
    return {name for wait in rows for name in (wait.arguments_json or [])}


def match(session: Session, action_id: int) -> int:
    """Give the action's pending signals, oldest first, to its open waits, oldest first,
    each wait the first signal it waits for: how many were consumed."""
    waits = list(session.scalars(_OPEN_WAITS, {"action_id": action_id}))
    if not waits:
        return 0
    consumed = 0
    for signal in session.scalars(_INBOX, {"action_id": action_id}).all():
        wait = next((w for w in waits if signal.name in (w.arguments_json or [])), None)
        if wait is None:
            continue
        waits.remove(wait)
        _consume(session, signal, wait)
        consumed += 1
        if not waits:
            break
    return consumed


def _consume(session: Session, signal: Signal, wait: Invocation) -> None:
    now = clock.now()
    signal.consumed_at, signal.consumed_by_id = now, wait.id
    row = session.execute(
        update(Invocation)
        .where(Invocation.id == wait.id, Invocation.concluded_at.is_(None))
        .values(concluded_at=now, settled_at=now, outcome="signal", succeeded=True)
        .returning(Invocation.parent_step_id)
        .execution_options(synchronize_session=False)
    ).first()
    assert row is not None and row[0] is not None  # locked above, open, and a step's wait
    session.flush()
    action = session.get(Action, signal.action_id)
    history.record(
        session,
        action,
        "signal_consumed",
        invocation_id=wait.id,
        step_id=row[0],
        signal_id=signal.id,
        name=signal.name,
    )
    conclude(session, row[0], True)


def unmatched(session: Session, before: datetime, limit: int) -> list[int]:
    """Actions with a signal older than ``before`` still in the inbox while a wait older
    than ``before`` waits for its name: their match message was lost (the sweeper sends it
    again)."""
    waits: dict[int, set[str]] = {}
    for names, action_id in session.execute(
        select(Invocation.arguments_json, Step.action_id)
        .join(Step, Step.id == Invocation.parent_step_id)
        .where(
            Invocation.kind == "wait",
            Invocation.name == SIGNAL_WAIT,
            Invocation.concluded_at.is_(None),
            Invocation.created_at < before,
        )
        .order_by(Invocation.id)
        .limit(limit)
    ):
        waits.setdefault(action_id, set()).update(names or [])
    if not waits:
        return []
    pending = session.execute(
        select(Signal.action_id, Signal.name).where(
            Signal.consumed_at.is_(None), Signal.created_at < before, Signal.action_id.in_(sorted(waits))
        )
    )
    return sorted({action_id for action_id, name in pending if name in waits[action_id]})


def match_after_commit(action_id: int) -> list[int]:
    """Match again in a transaction of its own (the ``MATCH_SIGNALS`` job): the steps it made
    ready."""
    _, ready, _ = group_commit.run(lambda session: match(session, action_id))
    return ready


def received(session: Session, step: Step) -> tuple[list[Received], bool]:
    """What the signal waits of ``step`` came to, in the order it made them: the signals
    they consumed, and whether a deadline passed for any of them."""
    rows = session.execute(
        select(Invocation, Signal)
        .outerjoin(Signal, Signal.consumed_by_id == Invocation.id)
        .where(
            Invocation.parent_step_id == step.id, Invocation.kind == "wait", Invocation.name == SIGNAL_WAIT
        )
        .order_by(Invocation.id)
    ).all()
    signals = [
        Received(s.id, s.name, arguments.load(session, s.payload), s.sent_by, s.note, s.created_at)
        for _, s in rows
        if s is not None
    ]
    return signals, any(wait.outcome == "deadline" for wait, _ in rows)
