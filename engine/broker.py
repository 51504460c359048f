"""The broker: where jobs' messages go, chosen from the environment, and sent only after
the transaction that caused them commits.

A message is a doorbell, never the truth: it carries ids, and every job checks the
database before acting, so a lost, late or duplicated message changes nothing.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import dramatiq
from dramatiq.brokers.stub import StubBroker
from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction

from . import clock, commit_buffers, config
from .redis_doorbell import DoorbellRedisBroker
from .worker_process import WorkerProcess

log = logging.getLogger("stepwise")

QUEUE = "stepwise"

# The engine's jobs by message name (declared in engine/jobs.py): transitions address
# them by name, so no transition imports the jobs module.
ADMIT = "stepwise.admit"
PERFORM_STEP = "stepwise.perform_step"
TIMEOUT = "stepwise.timeout"
WAIT_OVER = "stepwise.wait_over"
COMPLETE = "stepwise.complete"
MATCH_SIGNALS = "stepwise.match_signals"
REMIND = "stepwise.remind"
PERFORM_ATTEMPT = "stepwise.perform_attempt"
CHECK_ATTEMPT = "stepwise.check_attempt"

_AFTER_COMMIT = "stepwise.after_commit"
commit_buffers.COMMIT_BUFFERS.add(_AFTER_COMMIT)
_READY = "stepwise.ready_steps"
_ADMISSIONS = "stepwise.ready_admissions"
_OPENED = "stepwise.opened_steps"
_DUE = "stepwise.due_admissions"
commit_buffers.COMMIT_BUFFERS.add(_DUE)
_sequence = itertools.count()


def from_environment() -> dramatiq.Broker:
    """``REDIS_URL``, then ``RABBITMQ_URL``, else Dramatiq's in-memory stub broker."""
    redis_url = os.environ.get("REDIS_URL")
    if redis_url:
        return DoorbellRedisBroker(url=redis_url)
    rabbitmq_url = os.environ.get("RABBITMQ_URL")
    if rabbitmq_url:
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        return RabbitmqBroker(url=rabbitmq_url)
    return StubBroker()


_configured = False


def setup() -> dramatiq.Broker:
    """Install the environment's broker as Dramatiq's global broker, once per process, with
    the middleware that tunes a worker process's garbage collector and runs its pool of
    local runs (engine/worker_process.py)."""
    global _configured
    if not _configured:
        broker = from_environment()
        broker.add_middleware(WorkerProcess(local_job=PERFORM_STEP))
        dramatiq.set_broker(broker)
        _configured = True
    return dramatiq.get_broker()


def use(broker: dramatiq.Broker) -> dramatiq.Broker:
    """Switch to ``broker`` and declare every known job on it (tests, embedded worker)."""
    global _configured
    previous = dramatiq.get_broker() if _configured else None
    dramatiq.set_broker(broker)
    _configured = True
    if previous is not None:
        for name in previous.get_declared_actors():
            broker.declare_actor(previous.get_actor(name))
    return broker


def after_commit(session: Session, callback: Callable[[], Any]) -> None:
    """Run ``callback`` once the session's current transaction commits; drop it on rollback."""
    session.info.setdefault(_AFTER_COMMIT, []).append(callback)


def ready(session: Session) -> list[int]:
    """Steps opened by committed transactions of ``session`` whose bodies have not run:
    the session's owner runs them (a worker) or sends them to workers (a web request)."""
    return session.info.setdefault(_READY, [])  # type: ignore[no-any-return]


def ready_after_commit(session: Session, step_id: int) -> None:
    """Once this transaction commits, the body of step ``step_id`` is ready to run. Inside
    a group-commit unit's ``collecting``, the unit's ``opened`` list has it at once: its
    batch may claim it for the unit's thread before committing (engine/claiming.py)."""
    target = ready(session)
    after_commit(session, lambda: target.append(step_id))
    opened = session.info.get(_OPENED)
    if opened is not None:
        opened.append(step_id)


def admit_soon(session: Session, invocation_id: int) -> None:
    """Once this transaction commits, the invocation is due for admission: a worker that
    collects admissions (``admitting_here``) admits it in its own process, with no broker
    round trip; anywhere else its message goes to the broker. Either way the invocation
    row is the outbox: if this process dies first, the sweeper sends it again. Inside a
    group-commit unit that admits what it makes due (``collecting`` given ``due``), it is
    admitted in the same transaction instead (engine/batch_admission.py)."""
    due = session.info.get(_DUE)
    if due is not None and config.admit_children_here:
        due.append(invocation_id)
        return
    target = session.info.get(_ADMISSIONS)
    if target is None or not config.admit_children_here:
        enqueue(session, ADMIT, invocation_id)
    else:
        after_commit(session, lambda: target.append(invocation_id))


def admitting_here(session: Session, admissions: list[int]) -> Redirected:
    """Inside the block, invocations due for admission in ``session`` go to ``admissions``."""
    return Redirected(session, {_ADMISSIONS: admissions})


def collecting(
    session: Session,
    callbacks: list[Callable[[], Any]],
    steps: list[int],
    admissions: list[int],
    opened: list[int],
    due: list[int] | None = None,
) -> Redirected:
    """Inside the block, what ``after_commit``, ``ready_after_commit`` and ``admit_soon``
    register in ``session`` goes to ``callbacks``, ``steps`` (and ``opened``, at once) and
    ``admissions`` (or, given ``due``, there at once: for this transaction to admit them):
    one transition's share of a transaction that several share (engine/group_commit.py)."""
    lists: dict[str, list[Any] | None] = {_AFTER_COMMIT: callbacks, _READY: steps, _ADMISSIONS: admissions}
    lists[_OPENED] = opened
    lists[_DUE] = due
    return Redirected(session, lists)


class Redirected:
    """A context in which ``session.info`` holds ``lists`` under their keys, and what it
    held before afterwards. (A class, not a generator: a batch enters one per transition it
    holds, several times over.)"""

    __slots__ = ("info", "lists", "saved")

    def __init__(self, session: Session, lists: dict[str, list[Any] | None]) -> None:
        self.info = session.info
        self.lists = lists
        self.saved: dict[str, Any] = {}

    def __enter__(self) -> None:
        info = self.info
        self.saved = {key: info.get(key) for key in self.lists}
        info.update(self.lists)

    def __exit__(self, *exc: object) -> None:
        info = self.info
        for key, value in self.saved.items():
            if value is None:
                info.pop(key, None)
            else:
                info[key] = value


def run_callback(callback: Callable[[], Any]) -> None:
    """Run an after-commit callback; a failure is logged, never raised: the database holds
    the truth, and the sweeper sends again what a lost message left undone."""
    try:
        callback()
    except Exception:
        log.exception("stepwise: could not run an after-commit callback")


def take_after_commit(session: Session) -> list[Callable[[], Any]]:
    """Remove and return the callbacks registered so far in this transaction."""
    return session.info.pop(_AFTER_COMMIT, None) or []


def enqueue(
    session: Session,
    job: str | Any,
    *args: Any,
    delay: timedelta | None = None,
    on_sent: Callable[[], Any] | None = None,
) -> None:
    """Send ``job(*args)`` after the session's transaction commits, then call ``on_sent``
    (to record that the broker took the message) unless the send failed."""

    def deliver() -> None:
        send(job, *args, delay=delay)
        if on_sent is not None:
            on_sent()

    after_commit(session, deliver)


def send(job: str | Any, *args: Any, delay: timedelta | None = None) -> None:
    """Send a message now to ``job``: an engine job by message name, or a Dramatiq actor."""
    broker = dramatiq.get_broker()
    message: dramatiq.Message[Any]
    if isinstance(job, str):
        message = _message(broker, job, args, delay)
    else:
        if job.actor_name not in broker.get_declared_actors():
            broker.declare_actor(job)
        message = job.message_with_options(args=args, **_options(delay))
    broker.enqueue(message, delay=int(delay.total_seconds() * 1000) if delay else None)


def send_all(job: str, arguments: Sequence[tuple[Any, ...]]) -> None:
    """Send a message now to the engine job ``job`` for each tuple of ``arguments``: on
    Redis in one round trip (engine/redis_doorbell.py), elsewhere one by one."""
    broker = dramatiq.get_broker()
    messages = [_message(broker, job, args, None) for args in arguments]
    if isinstance(broker, DoorbellRedisBroker):
        broker.enqueue_all(messages)
    else:
        for message in messages:
            broker.enqueue(message)


def _message(
    broker: dramatiq.Broker, job: str, args: tuple[Any, ...], delay: timedelta | None
) -> dramatiq.Message[Any]:
    if QUEUE not in broker.get_declared_queues():
        broker.declare_queue(QUEUE)
    return dramatiq.Message(queue_name=QUEUE, actor_name=job, args=args, kwargs={}, options=_options(delay))


def _options(delay: timedelta | None) -> dict[str, Any]:
    """What the engine's messages carry: when they are due, and their order of sending."""
    due = clock.now() + (delay or timedelta())
    return {"stepwise_due": due.isoformat(), "stepwise_seq": next(_sequence)}


@event.listens_for(Session, "after_commit")
def _send_after_commit(session: Session) -> None:
    if commit_buffers.in_savepoint(session):
        return  # a SAVEPOINT released: the transaction has not committed yet
    callbacks = session.info.pop(_AFTER_COMMIT, None)
    for callback in callbacks or ():
        run_callback(callback)


@event.listens_for(Session, "after_soft_rollback")
def _drop_after_rollback(session: Session, previous: SessionTransaction) -> None:
    if previous.parent is None and previous.nested is False:
        session.info.pop(_AFTER_COMMIT, None)
