"""Test helpers, like Stepped's test helper: a synchronous drain of the in-memory broker
with control of time, outbound completion helpers, handled-exception control and
assertions whose failure messages list what did run.

Call ``setup()`` once per test (the project's conftest does): it installs a fresh stub
broker, resets the clock and handles no exceptions, so errors in user code surface.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import dramatiq
from dramatiq.brokers.stub import StubBroker
from dramatiq.message import Message
from sqlalchemy import func, select

from . import broker, clock, config, db, jobs, sending, status
from .clock import freeze, travel
from .config import handling as handle_exceptions
from .invocation import Invocation
from .outbound import complete_action
from .performance import Performance
from .registry import actor_ref

__all__ = [
    "assert_action_invoked",
    "assert_no_actions",
    "complete_outbound",
    "drain",
    "enqueued",
    "freeze",
    "handle_exceptions",
    "perform_actions",
    "perform_enqueued",
    "send_signal",
    "setup",
    "travel",
]


def setup() -> StubBroker:
    """A fresh stub broker, a real-time clock, and no handled exceptions."""
    stub = StubBroker()
    broker.use(stub)
    for job in (
        jobs.admit,
        jobs.perform_step,
        jobs.timeout,
        jobs.wait_over,
        jobs.match_signals,
        jobs.remind,
        jobs.complete,
        jobs.perform_attempt,
        jobs.check_attempt,
    ):
        stub.declare_actor(job)
    clock.reset()
    config.handle_exceptions = ()
    config.admit_children_here = False
    return stub


@dataclass
class Enqueued:
    message: Message[Any]
    queue: str
    due: datetime | None

    @property
    def job(self) -> str:
        return self.message.actor_name

    @property
    def args(self) -> tuple[Any, ...]:
        return tuple(self.message.args)


def _stub() -> StubBroker:
    current = dramatiq.get_broker()
    if not isinstance(current, StubBroker):
        raise RuntimeError("engine.testing needs the stub broker: call engine.testing.setup()")
    return current


def _due(message: Message[Any]) -> datetime | None:
    value = message.options.get("stepwise_due")
    return datetime.fromisoformat(value) if value else None


def _take_all() -> list[Enqueued]:
    stub = _stub()
    taken: list[Enqueued] = []
    for name, queue in stub.queues.items():
        while not queue.empty():
            message = Message.decode(queue.get_nowait())
            queue.task_done()
            taken.append(Enqueued(message, name, _due(message)))
    taken.sort(key=lambda e: (e.message.options.get("stepwise_seq", 0), e.message.message_timestamp))
    return taken


def _put_back(items: list[Enqueued]) -> None:
    stub = _stub()
    for item in items:
        stub.queues[item.queue].put(item.message.encode())


def enqueued(job: str | None = None) -> list[Enqueued]:
    """The messages waiting in the stub broker (optionally of one job, e.g. "stepwise.admit")."""
    items = _take_all()
    _put_back(items)
    return [i for i in items if job is None or i.job == job]


def perform_enqueued(only: Callable[[Enqueued], bool] | None = None) -> int:
    """Perform the messages that are due now and were enqueued before this call; messages
    they enqueue stay queued. Returns how many were performed."""
    items = _take_all()
    now = clock.now()
    run: list[Enqueued] = []
    kept: list[Enqueued] = []
    for item in items:
        due = (item.due is None or item.due <= now) and (only is None or only(item))
        (run if due else kept).append(item)
    _put_back(kept)
    for item in run:
        _perform(item)
    return len(run)


def _perform(item: Enqueued) -> None:
    job = _stub().get_actor(item.job)
    try:
        job.fn(*item.message.args, **item.message.kwargs)
    except dramatiq.Retry as retry:
        delay = timedelta(milliseconds=retry.delay or 0)
        due = clock.now() + delay
        message = item.message.copy(options={**item.message.options, "stepwise_due": due.isoformat()})
        _stub().queues[item.queue].put(message.encode())


def drain(only: Callable[[Enqueued], bool] | None = None) -> int:
    """Perform due messages, and the ones they enqueue, until none is due. Returns the count."""
    total = 0
    while performed := perform_enqueued(only):
        total += performed
    return total


def send_signal(target: Any, name: str, payload: Any = None, **how: Any) -> Any:
    """Send a signal (``engine.signal``) and drain what it set moving; the signal row."""
    sent = sending.signal(target, name, payload, **how)
    drain()
    return sent


def complete_outbound(to: str = status.SUCCEEDED) -> int:
    """Complete the current action of every lane whose current action is outbound."""
    with db.session() as session:
        ids = session.scalars(
            select(Performance.action_id).where(Performance.outbound_complete_key.is_not(None))
        ).all()
    for action_id in ids:
        complete_action(action_id, to)
    return len(ids)


def perform_actions(*, complete_outbound_with: str | None = None, rounds: int = 100) -> int:
    """Drain the broker; with ``complete_outbound_with``, also complete waiting outbound
    actions with that status, until nothing is left to do. Returns the jobs performed."""
    total = 0
    for _ in range(rounds):
        total += drain()
        if complete_outbound_with is None or not complete_outbound(complete_outbound_with):
            return total
    raise AssertionError(f"actions still moving after {rounds} rounds: {_lanes()}")


def _lanes() -> list[str]:
    with db.session() as session:
        return [f"{p.concurrency_key} -> action {p.action_id}" for p in session.scalars(select(Performance))]


def _invocations_since(first_id: int) -> list[Invocation]:
    with db.session() as session:
        return list(
            session.scalars(
                select(Invocation)
                .where(Invocation.id > first_id, Invocation.kind == "action")
                .order_by(Invocation.id)
            )
        )


def _last_invocation_id() -> int:
    with db.session() as session:
        return int(session.scalar(select(func.coalesce(func.max(Invocation.id), 0))) or 0)


@contextmanager
def assert_action_invoked(name: str, actor: Any = None) -> Iterator[None]:
    """Assert that the block invoked action ``name`` (on ``actor``, if given)."""
    first = _last_invocation_id()
    yield
    seen = _invocations_since(first)
    ref = actor_ref(actor) if actor is not None else None
    matching = [i for i in seen if i.name == name and (ref is None or (i.actor_type, i.actor_id) == ref)]
    if not matching:
        listing = ", ".join(f"{i.actor_type}/{i.actor_id}#{i.name}" for i in seen) or "none"
        target = f" on {ref[0]}/{ref[1]}" if ref else ""
        raise AssertionError(f"expected action {name!r}{target} to be invoked; invoked: {listing}")


@contextmanager
def assert_no_actions() -> Iterator[None]:
    """Assert that the block invoked no action."""
    first = _last_invocation_id()
    yield
    seen = _invocations_since(first)
    if seen:
        listing = ", ".join(f"{i.actor_type}/{i.actor_id}#{i.name}" for i in seen)
        raise AssertionError(f"expected no action to be invoked; invoked: {listing}")
