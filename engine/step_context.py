"""The ``step`` argument of a step body: how user code starts child actions and waits.

Children are buffered and recorded only if the body returns normally (Stepped's rule), each
as an invocation that concludes its step exactly once (invariant 3).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from . import arguments, broker, clock, compensation, heartbeat, history, inbox, recovery, result, status
from .definition import find_or_add
from .errors import ArgumentError
from .inbox import Received
from .invocation import Invocation, request
from .result import Child

if TYPE_CHECKING:
    from .action import Action
    from .step import Step


class StepContext:
    """The ``step`` argument of a step body: start child actions and waits.

    Children are recorded only if the body returns normally; the next step starts when
    all of them have concluded."""

    def __init__(self, session: Session, step: Step, action: Action) -> None:
        self.session = session
        self.step = step
        self.action = action
        self._children: list[tuple[Any, str, tuple[Any, ...]]] = []
        self._waits: list[timedelta] = []
        #: Waits for signals: what each waits for (any of the names), its deadline and reminder.
        self._signal_waits: list[inbox.WaitFor] = []
        self._failed = False
        #: Compensations registered (actor, action name, stored arguments), recorded with the children.
        self._compensations: list[tuple[Any, str, Any]] = []
        #: The decision the body took (None: the next step) and, for ``finish``, its result.
        self.decision: dict[str, Any] | None = None
        self.finish_result: Any = None
        #: The heartbeat of the running durable attempt (engine/durable.py); None otherwise.
        self.beat: heartbeat.Beat | None = None

    def asked_nothing(self) -> bool:
        """Whether the body left nothing to record but its result: no children, waits,
        compensations, failure or decision (then its step concludes at once)."""
        return not (
            self._children
            or self._waits
            or self._signal_waits
            or self._compensations
            or self._failed
            or self.decision is not None
        )

    def asked_only_children(self) -> bool:
        """Whether the body asked for children and nothing else (no waits, compensations,
        failure or decision): a batch records those of many bodies together."""
        return bool(self._children) and not (
            self._waits
            or self._signal_waits
            or self._compensations
            or self._failed
            or self.decision is not None
        )

    def rebind(self, session: Session, step: Step, action: Action) -> None:
        """Record this body's outcome in another session than the one it ran in."""
        self.session, self.step, self.action = session, step, action

    def do(self, target: Any, *args: Any) -> None:
        """Start an action on this step's actor: ``step.do("honk")`` or ``step.do(self.drive, 5)``.
        A bound action or method of another actor runs on that actor."""
        actor = getattr(target, "__self__", None) or getattr(target, "actor", None)
        self.on(actor if actor is not None else self.action.actor, target, *args)

    def on(self, actors: Any, name: Any, *args: Any) -> None:
        """Start action ``name`` on one actor or a list of them; ``None`` entries are dropped."""
        action_name = name if isinstance(name, str) else getattr(name, "__name__", None)
        if not isinstance(action_name, str):
            raise TypeError(f"step.on takes an action name or a bound action, not {name!r}")
        for actor in _actors(actors):
            find_or_add(type(actor), action_name)
            self._children.append((actor, action_name, args))

    # --- compensations (engine/compensation.py) ----------------------------------------

    def compensate(self, target: Any, *args: Any) -> None:
        """Register the action that undoes this step, run if the action finally fails or is
        cancelled after this step succeeded: ``step.compensate("refund", step.child_result(
        "charge"))``. Like ``do``, a bound action or method of another actor runs on it."""
        actor = getattr(target, "__self__", None) or getattr(target, "actor", None)
        self.compensate_on(actor if actor is not None else self.action.actor, target, *args)

    def compensate_on(self, actor: Any, name: Any, *args: Any) -> None:
        """Register action ``name`` on ``actor`` as what undoes this step."""
        action_name = name if isinstance(name, str) else getattr(name, "__name__", None)
        if not isinstance(action_name, str):
            raise TypeError(f"step.compensate takes an action name or a bound action, not {name!r}")
        find_or_add(type(actor), action_name).check_runnable()
        self._compensations.append((actor, action_name, compensation.dump(list(args))))

    def child_result(self, which: str | int) -> compensation.ChildResult:
        """A compensation's argument that is the result of a child this body started
        before (by action name, the first of that name, or by position), filled in when
        the compensation runs."""
        names = [name for _, name, _ in self._children]
        if isinstance(which, str):
            if which not in names:
                raise ArgumentError(
                    f"step.child_result({which!r}): this step has started no child {which!r} "
                    f"(started: {', '.join(names) or 'none'}); start it with step.do first"
                )
            return compensation.ChildResult(name=which)
        if not 0 <= which < len(names):
            raise ArgumentError(f"step.child_result({which}): this step has started {len(names)} children")
        return compensation.ChildResult(index=which)

    # --- results --------------------------------------------------------------------

    @property
    def children(self) -> list[Child]:
        """What each child of the previous step came to (name, status, result), in the
        order it requested them."""
        previous = result.previous_step(self.session, self.step)
        return result.children(self.session, previous) if previous is not None else []

    @property
    def results(self) -> list[Any]:
        """The results of the previous step's children, in the order it requested them."""
        return [child.result for child in self.children]

    @property
    def previous_result(self) -> Any:
        """What the previous step's body returned."""
        previous = result.previous_step(self.session, self.step)
        return result.value(self.session, previous.result) if previous is not None else None

    @property
    def received(self) -> list[Received]:
        """The signals the previous step's waits consumed, in the order it waited for them."""
        previous = result.previous_step(self.session, self.step)
        return inbox.received(self.session, previous)[0] if previous is not None else []

    @property
    def signal(self) -> Received | None:
        """The first signal the previous step's waits consumed (None: none, its deadline passed)."""
        received = self.received
        return received[0] if received else None

    @property
    def deadline_passed(self) -> bool:
        """Whether a deadline of the previous step's waits for signals passed first."""
        previous = result.previous_step(self.session, self.step)
        return inbox.received(self.session, previous)[1] if previous is not None else False

    # --- durable attempts: heartbeats, checkpoints, recovery --------------------------

    def heartbeat(self, progress: Any = None, checkpoint: Any = None) -> None:
        """Report that this body lives, with its ``progress`` (a fraction 0..1 or a short
        text) and a ``checkpoint`` (any value ``engine.arguments`` stores) the next attempt
        resumes from. Throttled: call it as often as you like. Raises ``Cancelled`` when the
        action was cancelled (or completed) or this attempt was closed: clean up, re-raise."""
        if self.beat is None:
            raise ArgumentError(
                f"step.heartbeat() in action {self.action.id} ({self.action.name}): its step has no "
                f"durable attempts; declare heartbeat_timeout=, attempt_timeout= or recover= on it"
            )
        heartbeat.beat(self.beat, progress, checkpoint)

    @property
    def checkpoint(self) -> Any:
        """The last checkpoint this step's attempts reported (None: none yet): where a
        retried attempt resumes."""
        return heartbeat.checkpoint(self.session, self.beat)

    @property
    def failure(self) -> recovery.Failure | None:
        """In a recovery step: the failure of the step that recovered to it (class, message,
        attempt, ``may_have_run``); None in a step reached otherwise."""
        previous = result.previous_step(self.session, self.step)
        return recovery.failure_of(previous.decision) if previous is not None else None

    # --- decisions ------------------------------------------------------------------

    def go_to(self, name: str) -> None:
        """Run the step called ``name`` next, once this one concludes: a branch, or a loop
        back to an earlier step (at most its ``max_visits`` times)."""
        self.action.definition.step_index(name)  # an unknown name fails the body here
        self.decision = {"go_to": name}

    def finish(self, value: Any = None) -> None:
        """Complete the action (succeeded) with the result ``value`` once this step
        concludes: the steps after it do not run."""
        self.finish_result = arguments.dump(value)
        self.decision = {"finish": True}

    def fail(self, reason: str) -> None:
        """Fail the action with ``reason`` once this step concludes (not retried: a
        decision, not an error)."""
        self.decision = {"fail": str(reason)}

    def wait_for(self, *names: str, timeout: timedelta | float | None = None) -> None:
        """Hold this step open until one of the signals ``names`` arrives (any of them), or
        ``timeout`` passes. A signal already in the inbox is taken at once. The next step
        reads what came (``step.signal``, ``step.received``) or ``step.deadline_passed``."""
        if not names:
            raise ArgumentError("wait_for takes the name of at least one signal")
        self._signal_waits.append(inbox.WaitFor([inbox.check_name(n) for n in names], _duration(timeout)))

    def wait_for_all(self, *names: str, timeout: timedelta | float | None = None) -> None:
        """Hold this step open until each of the signals ``names`` arrived (or each one's
        ``timeout`` passed)."""
        for name in names:
            self.wait_for(name, timeout=timeout)

    def wait_for_approval(
        self,
        timeout: timedelta | float | None = None,
        *,
        remind_after: timedelta | float | None = None,
        reminder: str | None = None,
    ) -> None:
        """Wait for "approved" or "rejected" (``engine.approve`` / ``engine.reject``, or the
        studio's buttons); the next step reads ``step.signal.name``. With ``remind_after``
        and ``reminder`` (an action name on this actor, called with this action's id), the
        reminder action is started once if no answer came by then."""
        if (remind_after is None) != (reminder is None):
            raise ArgumentError("wait_for_approval takes remind_after and reminder together")
        self.wait_for(inbox.APPROVED, inbox.REJECTED, timeout=timeout)
        if reminder is not None:
            find_or_add(type(self.action.actor), reminder).check_runnable()
            self._signal_waits[-1] = inbox.WaitFor(
                self._signal_waits[-1].names,
                self._signal_waits[-1].timeout,
                _duration(remind_after),
                reminder,
            )

    def wait(self, duration: timedelta | float) -> None:
        """Hold this step open for ``duration`` (a timedelta or seconds)."""
        self._waits.append(duration if isinstance(duration, timedelta) else timedelta(seconds=duration))

    @property
    def status(self) -> str:
        return status.STEP_FAILED if self._failed else self.step.status

    @status.setter
    def status(self, value: str) -> None:
        """``step.status = "failed"`` fails the step on purpose, without raising."""
        if value != status.STEP_FAILED:
            raise ValueError("a step body may only set its status to 'failed'")
        self._failed = True

    @property
    def idempotency_key(self) -> str:
        """Stable per step execution, for external side effects: action, step and attempt."""
        return f"stepwise:{self.action.id}:{self.step.definition_index}:{self.step.attempt}"

    def _record(self) -> None:
        """Insert the children's and waits' invocations (in one flush) and send their
        messages after commit; the step now waits on each of them."""
        if self._children:
            self.session.flush()  # a child's actor may be a row the body has just added
        invocations = self._requests()
        if invocations:
            self.session.add_all(invocations)
            self.session.flush()
        self._recorded(invocations)

    def _requests(self) -> list[Invocation]:
        """The invocations of this body's children and waits, not yet added to a session:
        a batch adds those of many bodies and inserts them in one flush."""
        children = [request(actor, name, args, self.step) for actor, name, args in self._children]
        now = clock.now()
        waits = [
            Invocation(
                kind="wait",
                actor_type=self.action.actor_type,
                actor_id=self.action.actor_id,
                name="wait",
                arguments_json=[duration.total_seconds()],
                parent_step_id=self.step.id,
                due_at=now + duration,
                created_at=now,
            )
            for duration in self._waits
        ]
        return [*children, *waits]

    def _recorded(self, invocations: list[Invocation]) -> None:
        """After ``invocations`` (``_requests``) were inserted: their messages, the signal
        waits, the compensations, and what the step now waits on."""
        children, waits = invocations[: len(self._children)], invocations[len(self._children) :]
        signal_waits = inbox.record_waits(self.session, self.action, self.step, self._signal_waits)
        if children or waits:
            for child in children:
                broker.admit_soon(self.session, child.id)
            for wait, duration in zip(waits, self._waits, strict=True):
                broker.enqueue(self.session, broker.WAIT_OVER, wait.id, delay=duration)
            history.record(
                self.session,
                self.action,
                "children_spawned",
                step_id=self.step.id,
                invocations=[child.id for child in children],
                waits=len(waits),
            )
        if self._compensations:
            compensation.register(self.session, self.step, self.action, self._compensations)
        self.step.pending_actions_count += len(children) + len(waits) + len(signal_waits)
        if self._failed:
            self.step.status = status.STEP_FAILED


def _duration(value: timedelta | float | None) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(seconds=value)


def _actors(actors: Any) -> Iterable[Any]:
    if actors is None:
        return []
    if isinstance(actors, (list, tuple, set)):
        return [a for a in actors if a is not None]
    return [actors]
