"""Group commit: the transitions that a worker process's threads produce share transactions.

A thread hands its transition (a function of a session) to ``run`` and waits. If no batch
is being written, it becomes the leader: it runs every transition waiting at that moment
in one transaction, commits once, and wakes their threads; transitions handed in while it
writes wait for the next batch, led by the first of their threads. An idle process thus
commits each transition at once (no added latency), and batches grow only under load, as
PostgreSQL's own WAL group commit does.

Each transition's thread gets its result (or its error) only after the batch committed:
its broker messages are sent and its Dramatiq message acknowledged after that, so delivery
stays at-least-once and nothing is acknowledged before it is durable. When one transition
of a batch fails, the batch is rolled back and each of its transitions runs again alone,
so the others commit and the failing one fails by itself; a deadlock or a lost connection
reruns the whole batch (nothing of it was committed).

A transition may also be handed in as data: an item and the function that runs every
such item of a batch together (``run_together``), so that one kind of transition costs
its statements once per batch, not once per item: the set-based kernel's shape
(``batch_admission.admit_all`` admits every invocation of a batch with one lock of their
rows, one of their lanes and one founding statement).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from sqlalchemy.orm import Session

from . import broker, db

log = logging.getLogger("stepwise")

T = TypeVar("T")

#: The most transitions one batch holds: a bound on the locks one transaction keeps and
#: on the work redone when the batch must be rerun.
MAX_BATCH = 64


class _Signal:
    """Wakes the one thread that waits for a unit: its batch committed, or it leads the
    next. A lock held from the start, released once: the waiter blocks in C, woken by a
    single release, where ``threading.Event`` runs a condition's Python on both sides and
    wakes its waiter only to have it wait again for the condition's lock (py-spy --gil
    put ~10% of a busy worker's samples in ``Event.wait`` and ``set``). ``set`` is called
    from one thread at a time (the leader that hands the lead on, then the batch's own
    leader), and again after it is set only by that unit's own thread, which no longer
    waits."""

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False

    def set(self) -> None:
        if not self._set:
            self._set = True
            self._lock.release()

    def wait(self) -> None:
        self._lock.acquire()


class Unit(Generic[T]):
    """One transition waiting for its batch: what to run, and what it came to."""

    __slots__ = (
        "admissions",
        "after_commit",
        "claim_ready",
        "claims",
        "done",
        "due",
        "error",
        "held",
        "item",
        "lead",
        "nearby",
        "opened",
        "ready",
        "result",
        "sends",
        "together",
        "work",
        "written",
    )

    def __init__(
        self,
        work: Callable[[Session], T] | None,
        together: Together | None = None,
        item: Any = None,
        claim_ready: int = 0,
        admit_due: bool = False,
    ) -> None:
        self.work = work
        #: Handed in as data: ``together`` runs this unit's ``item`` with the other units
        #: of its batch that name the same function, and sets each one's ``result``.
        self.together = together
        self.item = item
        self.done = _Signal()
        self.lead = False
        #: Its transaction ended: committed, or failed with ``error``.
        self.written = False
        self.result: T | None = None
        self.error: BaseException | None = None
        #: The broker messages, the ready steps and the invocations due for admission
        #: this transition produced, kept apart from the other transitions of its batch.
        self.after_commit: list[Callable[[], Any]] = []
        self.ready: list[int] = []
        self.admissions: list[int] = []
        #: The steps this transition opened (ready once committed), in order; the batch
        #: claims the first ``claim_ready`` of them for this unit's thread, which runs
        #: them, before it commits (``BEFORE_COMMIT``, engine/claiming.py): ``claims``, by
        #: step id.
        self.opened: list[int] = []
        self.claim_ready = claim_ready
        self.claims: dict[int, Any] = {}
        #: With ``admit_due``, the invocations this transition made due, admitted by its
        #: batch before it commits (``ADMIT_DUE``), and the steps those admissions opened
        #: that this unit's thread sends to the workers rather than runs.
        self.due: list[int] | None = [] if admit_due else None
        self.sends: list[int] = []
        #: Steps those admissions opened that the batch claimed for this process's pool
        #: (engine/local_runs.py): the thread hands them over rather than sends them.
        self.nearby: list[int] = []
        #: What the batch read for this unit and keeps until it commits (the session's
        #: identity map holds an object only while something refers to it).
        self.held: list[Any] = []

    def collecting(self, session: Session) -> broker.Redirected:
        """Inside the block, the broker messages, ready steps and due admissions ``session``
        registers are this unit's (a ``together`` function enters it for each item)."""
        lists = (self.after_commit, self.ready, self.admissions, self.opened)
        return broker.collecting(session, *lists, self.due)


#: Runs the items of several units at once in a batch's session; it enters each unit's
#: ``collecting`` for what belongs to that unit alone, and sets each unit's ``result``.
Together = Callable[[Session, Sequence[Unit[Any]]], None]

#: What a batch does once its transitions ran, with its session and its units: admit the
#: invocations they made due (engine/batch_admission.py adds itself here).
ADMIT_DUE: list[Together] = []

#: What every batch does last, before it commits, with its session and its units (a
#: module that needs it adds itself here: engine/claiming.py claims the steps units opened).
BEFORE_COMMIT: list[Together] = []


class GroupCommit:
    """The batches of one process (``shared()``), or of one test."""

    def __init__(self, max_batch: int = MAX_BATCH) -> None:
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._waiting: list[Unit[Any]] = []
        self._writing = False
        #: Figures for benchmarks: batches committed and transitions in them.
        self.batches = 0
        self.transitions = 0

    def idle(self) -> bool:
        """No batch is being written or waiting (a hint: it may change at once)."""
        return not self._writing and not self._waiting

    def run(self, work: Callable[[Session], T]) -> tuple[T, list[int], list[int]]:
        """Run ``work(session)`` in a shared transaction; return its result, the steps it
        made ready and the invocations it made due for admission, once committed. Its
        broker messages are sent before this returns."""
        return self._run(Unit(work))

    def run_together(self, together: Together, item: Any) -> tuple[Any, list[int], list[int]]:
        """``run`` for a transition handed in as data: ``together(session, units)`` runs
        ``item`` with every other item of the same batch handed to the same function."""
        return self._run(Unit(None, together, item))

    def run_claiming(
        self, together: Together, item: Any, claim_ready: int
    ) -> tuple[Any, list[int], list[int], dict[int, Any]]:
        """``run_together``, the first ``claim_ready`` steps it opens claimed for this
        thread in the same transaction (engine/claiming.py); also returns those claims."""
        unit: Unit[Any] = Unit(None, together, item, claim_ready)
        result, ready, admissions = self._run(unit)
        return result, ready, admissions, unit.claims

    def run_admitting(self, together: Together, item: Any, claim_ready: int) -> Unit[Any]:
        """``run_claiming``, the invocations it makes due admitted in the same transaction
        (``ADMIT_DUE``): the unit, once committed, with its ``ready`` steps, its due
        ``admissions``, its ``claims``, the steps the admissions opened that this thread
        sends to the workers (``sends``) and those claimed for this process's pool
        (``nearby``)."""
        # No module admits them here (batch_admission not imported): due after the commit.
        unit: Unit[Any] = Unit(None, together, item, claim_ready, admit_due=bool(ADMIT_DUE))
        self._run(unit)
        return unit

    def _run(self, unit: Unit[T]) -> tuple[T, list[int], list[int]]:
        with self._lock:
            self._waiting.append(unit)
            leads = not self._writing
            self._writing = True
        if not leads:
            unit.done.wait()
        if leads or unit.lead:
            self._lead(unit)
        for callback in unit.after_commit:
            broker.run_callback(callback)
        if unit.error is not None:
            raise unit.error
        return unit.result, unit.ready, unit.admissions  # type: ignore[return-value]

    def _lead(self, own: Unit[Any]) -> None:
        """Write the next batch from this thread (``own`` its unit). An exception that
        interrupts the thread itself, not the batch (``BaseException``: Dramatiq's time
        limit or shutdown raised in the thread wherever it is), rolls the batch back; the
        other units not yet written (each alone, after a failed batch) go back to the head
        of the queue, led on by one of their threads, and the interruption goes on in this
        one."""
        with self._lock:
            batch = self._waiting[: self.max_batch]
            del self._waiting[: self.max_batch]
        try:
            self._write(batch)
        except BaseException:
            unwritten = [unit for unit in batch if unit is not own and not unit.written]
            with self._lock:
                self._waiting[:0] = unwritten
            batch = [unit for unit in batch if unit is own or unit.written]
            raise
        finally:
            with self._lock:
                if self._waiting:
                    successor = self._waiting[0]
                    successor.lead = True
                    successor.done.set()
                else:
                    self._writing = False
            for unit in batch:
                unit.done.set()

    def _write(self, batch: list[Unit[Any]]) -> None:
        try:
            db.retrying_fresh(lambda session: self._run_all(session, batch))
        except Exception as error:
            if len(batch) == 1:
                batch[0].error, batch[0].written = error, True
                return
            log.info("a batch of %d transitions failed (%s): running each alone", len(batch), error)
            for unit in batch:
                self._write([unit])
            return
        for unit in batch:
            unit.written = True
        self.batches += 1
        self.transitions += len(batch)

    @staticmethod
    def _run_all(session: Session, batch: list[Unit[Any]]) -> None:
        db.plan_by_key(session)
        kinds: dict[Together, list[Unit[Any]]] = {}
        for unit in batch:
            unit.after_commit, unit.ready, unit.admissions, unit.result = [], [], [], None
            unit.opened, unit.claims, unit.sends, unit.nearby, unit.held = [], {}, [], [], []
            if unit.due is not None:
                unit.due = []
            if unit.together is not None:
                kinds.setdefault(unit.together, []).append(unit)
        for together, units in kinds.items():
            together(session, units)
        for unit in batch:
            if unit.work is not None:
                with unit.collecting(session):
                    unit.result = unit.work(session)
        for admit in ADMIT_DUE:
            admit(session, batch)
        for finish in BEFORE_COMMIT:
            finish(session, batch)


_shared: GroupCommit | None = None
_shared_lock = threading.Lock()


def shared() -> GroupCommit:
    """This process's group commit (one per process: its threads share its batches)."""
    global _shared
    if _shared is None:
        with _shared_lock:
            if _shared is None:
                _shared = GroupCommit()
    return _shared


def run(work: Callable[[Session], T]) -> tuple[T, list[int], list[int]]:
    """Run ``work`` in this process's next batch: see ``GroupCommit.run``."""
    return shared().run(work)


def run_together(together: Together, item: Any) -> tuple[Any, list[int], list[int]]:
    """Run ``item`` in this process's next batch: see ``GroupCommit.run_together``."""
    return shared().run_together(together, item)


def run_claiming(
    together: Together, item: Any, claim_ready: int
) -> tuple[Any, list[int], list[int], dict[int, Any]]:
    """Run ``item`` in this process's next batch: see ``GroupCommit.run_claiming``."""
    return shared().run_claiming(together, item, claim_ready)


def run_admitting(together: Together, item: Any, claim_ready: int) -> Unit[Any]:
    """Run ``item`` in this process's next batch: see ``GroupCommit.run_admitting``."""
    return shared().run_admitting(together, item, claim_ready)
