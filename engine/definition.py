"""Definitions: the declared shape of an action (steps, hooks, keys, checksum, timeout,
outbound flag), and the ``@action`` decorator that declares one on an actor class.

A definition only describes; the state machine lives in action, step and performance.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, overload

from . import attempt, broker, registry, status
from .achievement import checksum as checksum_of
from .errors import ArgumentError, UnknownAction
from .retry import RetryPolicy
from .retry import policy as retry_policy
from .step import job_sent

if TYPE_CHECKING:
    from .action import Action

StepFn = Callable[..., Any]
Hook = Callable[..., Any]
#: A key option: a literal string, a list joined with "/", a property, or a callable
#: called as a method with the action's arguments: ``fn(actor, *arguments)``.
KeyOption = str | Sequence[str] | property | Callable[..., Any] | None
TimeoutOption = timedelta | int | float | str | Callable[..., Any] | None
#: The longest concurrency or checksum key the key columns hold.
KEY_LENGTH = 255
#: How often one action may run the same step (a decision going back to it) unless the
#: step says otherwise: a loop past it fails the action instead of running forever.
MAX_VISITS = 10


def takes_step(fn: Callable[..., Any]) -> bool:
    """A function whose first parameter after ``self`` is named ``step`` is a step body;
    any other function is the method a one-step action calls."""
    params = list(inspect.signature(fn).parameters)
    return len(params) >= 2 and params[1] == "step"


class Definition:
    """What ``@action`` declares for one (actor class, action name)."""

    def __init__(
        self,
        actor_class: type,
        name: str,
        *,
        outbound: bool = False,
        timeout: TimeoutOption = None,
        concurrency_key: KeyOption = None,
        checksum: KeyOption = None,
        checksum_key: KeyOption = None,
        job: Any = None,
        retry: RetryPolicy | int | None = None,
        heartbeat_timeout: timedelta | float | None = None,
        attempt_timeout: timedelta | float | None = None,
        recover: str | None = None,
    ) -> None:
        self.actor_class = actor_class
        self.name = name
        self.outbound = outbound or job is not None
        self.timeout = timeout
        self.concurrency_key = concurrency_key
        self.checksum = checksum
        self.checksum_key = checksum_key
        self.job = job
        self.retry = retry_policy(retry)
        #: The method a step-less action calls; None means ``getattr(actor, name)``.
        self.method: Callable[..., Any] | None = None
        self.steps: list[StepFn] = []
        self.prepended: list[StepFn] = []
        self.before_hook: Hook | None = None
        self.callbacks: list[tuple[str, Hook]] = []
        #: ``max_visits`` of the steps that set one, by step name.
        self.visit_caps: dict[str, int] = {}
        #: Durable-attempt options (engine/attempt.py) by step name, and the action's own,
        #: which its steps that declare none take.
        self.attempt_options: dict[str, attempt.Options | None] = {}
        self.default_attempt_options = attempt.options(heartbeat_timeout, attempt_timeout, recover)

    def __repr__(self) -> str:
        return f"<Definition {self.actor_class.__name__}.{self.name}>"

    def copy_for(self, actor_class: type) -> Definition:
        """This definition, for a subclass to change: its lists of steps, prepended steps
        and callbacks are its own, so adding to them leaves this one alone."""
        mine = copy.copy(self)
        mine.actor_class = actor_class
        mine.steps = list(self.steps)
        mine.prepended = list(self.prepended)
        mine.callbacks = list(self.callbacks)
        mine.visit_caps = dict(self.visit_caps)
        mine.attempt_options = dict(self.attempt_options)
        return mine

    # --- declaring --------------------------------------------------------------------

    def body(self, fn: Callable[..., Any]) -> Definition:
        """Use ``fn`` as the first step (it takes ``step``) or as the plain method."""
        if takes_step(fn):
            self.steps.append(fn)
        else:
            self.method = fn
        return self

    def step(
        self,
        fn: StepFn | None = None,
        /,
        *,
        max_visits: int | None = None,
        heartbeat_timeout: timedelta | float | None = None,
        attempt_timeout: timedelta | float | None = None,
        recover: str | None = None,
    ) -> Any:
        """Append a step: ``fn(actor, step, *arguments)``, named after its function.
        ``max_visits`` caps how often one action may run it (decisions going back to it;
        default ``MAX_VISITS``). ``heartbeat_timeout``, ``attempt_timeout`` and ``recover``
        (the step to go to once its retries are exhausted) make its attempts durable."""

        def add(step_fn: StepFn) -> StepFn:
            declared = attempt.options(heartbeat_timeout, attempt_timeout, recover)
            if declared is not None:
                self.attempt_options[step_fn.__name__] = declared
            if max_visits is not None:
                if max_visits < 1:
                    raise ArgumentError(f"max_visits of step {step_fn.__name__} must be at least 1")
                self.visit_caps[step_fn.__name__] = max_visits
            self.steps.append(step_fn)
            return step_fn

        return add(fn) if fn is not None else add

    def prepend_step(self, fn: StepFn) -> StepFn:
        """Put a step in front of all the others."""
        self.prepended.insert(0, fn)
        return fn

    def before(self, fn: Hook) -> Hook:
        """The hook run before the action joins its lane: ``fn(actor, action, *arguments)``.
        It may call ``action.cancel()`` or ``action.complete()``, or replace
        ``action.arguments``. One per definition; the last one declared wins."""
        self.before_hook = fn
        return fn

    @overload
    def after(self, fn: Hook, /) -> Hook: ...
    @overload
    def after(self, *statuses: str) -> Callable[[Hook], Hook]: ...

    def after(self, *statuses: Any) -> Any:
        """Add an after-callback for the given statuses, or for all when none are given:
        ``@visit.after("failed", "timed_out")`` or ``@visit.after``."""
        if len(statuses) == 1 and callable(statuses[0]):
            self.callbacks.append((status.ALL, statuses[0]))
            return statuses[0]
        for name in statuses:
            if name not in status.CALLBACK_STATUSES:
                raise ArgumentError(f"after-callbacks take {sorted(status.CALLBACK_STATUSES)}, not {name!r}")

        def register(fn: Hook) -> Hook:
            for name in statuses or (status.ALL,):
                self.callbacks.append((name, fn))
            return fn

        return register

    def succeeded(self, fn: Hook) -> Hook:
        return self.after(status.SUCCEEDED)(fn)

    def failed(self, fn: Hook) -> Hook:
        return self.after(status.FAILED)(fn)

    def cancelled(self, fn: Hook) -> Hook:
        return self.after(status.CANCELLED)(fn)

    def timed_out(self, fn: Hook) -> Hook:
        return self.after(status.TIMED_OUT)(fn)

    # --- reading ----------------------------------------------------------------------

    def all_steps(self) -> list[StepFn]:
        """Prepended steps, then the declared ones, or the one default step."""
        return [*self.prepended, *(self.steps or [self.default_step])]

    def step_names(self) -> list[str]:
        """The steps' names, in order: their functions' names (the one default step is
        named after the action)."""
        return [self.name if fn == self.default_step else fn.__name__ for fn in self.all_steps()]

    def step_index(self, name: str) -> int:
        """The index of the step called ``name``; ``ArgumentError`` naming the steps there are."""
        names = self.step_names()
        if name not in names:
            raise ArgumentError(
                f"{self.actor_class.__name__}.{self.name} has no step {name!r}; its steps are "
                f"{', '.join(names)}"
            )
        return names.index(name)

    def recovery_targets(self) -> set[str]:
        """The steps some step recovers to (``recover=``)."""
        declared = [*self.attempt_options.values(), self.default_attempt_options]
        return {o.recover for o in declared if o is not None and o.recover is not None}

    def max_visits(self, index: int) -> int:
        return self.visit_caps.get(self.step_names()[index], MAX_VISITS)

    def default_step(self, actor: Any, step: Any, *arguments: Any) -> Any:
        if self.job is not None:
            # Confirmed once the broker took it: until then the sweeper sends it again.
            broker.enqueue(step.session, self.job, step.action.id, on_sent=partial(job_sent, step.step.id))
            return None
        method = self.method
        if method is not None:
            return method(actor, *arguments)
        return getattr(actor, self.name)(*arguments)

    def check_runnable(self) -> None:
        """Raise ``UnknownAction`` when the action has nothing to run: no step, no job, no
        body, and no method of its name on the actor class."""
        if self.steps or self.prepended or self.method or self.job is not None:
            return
        if not callable(getattr(self.actor_class, self.name, None)):
            raise UnknownAction(self.actor_class.__name__, self.name)

    def callbacks_for(self, completed_status: str) -> list[Hook]:
        return [fn for name, fn in self.callbacks if name in (completed_status, status.ALL)]

    def tenancy_key(self, action: Action) -> str:
        return f"{action.actor_type}/{action.actor_id}/{self.name}"

    def key(
        self, option: KeyOption, actor: Any, arguments: Sequence[Any], default: str, what: str = "key"
    ) -> str:
        """The ``what`` key (``concurrency_key`` or ``checksum_key``) for these arguments;
        ``ArgumentError`` when it is longer than ``KEY_LENGTH``."""
        value = option if isinstance(option, (str, list, tuple)) else call(option, actor, arguments)
        if value is None or value is False or value == "" or value == [] or value == ():
            key = default
        elif isinstance(value, (list, tuple)):
            key = "/".join(str(v) for v in value) or default
        else:
            key = str(value)
        if len(key) > KEY_LENGTH:
            raise ArgumentError(
                f"the {what} of {self.actor_class.__name__}.{self.name} is {len(key)} characters "
                f"long, more than the {KEY_LENGTH} a key may have: {key[:40]!r}… Build it from "
                f"shorter parts, or use engine.checksum() of the long part"
            )
        return key

    def checksum_value(self, actor: Any, arguments: Sequence[Any]) -> str | None:
        if self.checksum is None:
            return None
        return checksum_of(call(self.checksum, actor, arguments))

    def timeout_seconds(self, actor: Any, arguments: Sequence[Any]) -> float | None:
        option = self.timeout
        if option is None:
            return None
        value = getattr(actor, option) if isinstance(option, str) else option
        if callable(value) and not isinstance(value, timedelta):
            value = value() if isinstance(option, str) else value(actor, *arguments)
        if value is None:
            return None
        if isinstance(value, timedelta):
            return value.total_seconds()
        return float(value)


def call(option: Any, actor: Any, arguments: Sequence[Any]) -> Any:
    if option is None:
        return None
    if isinstance(option, property):
        return option.fget(actor) if option.fget else None
    if callable(option):
        return option(actor, *arguments)
    return option


def define(actor_class: type, name: str, fn: Callable[..., Any] | None = None, **options: Any) -> Definition:
    """Declare (or redeclare) action ``name`` on ``actor_class`` outside its class body.

    Without ``fn`` the action calls the method of the same name. Redeclaring replaces the
    whole definition, callbacks included."""
    definition = Definition(actor_class, name, **options)
    if fn is not None:
        definition.body(fn)
    return registry.add(definition)


def find_or_add(cls: type, name: str) -> Definition:
    """The definition of ``name`` for ``cls``; an undeclared method becomes a one-step action."""
    found = registry.find(cls, name)
    if found is not None:
        return found
    if not callable(getattr(cls, name, None)):
        raise UnknownAction(cls.__name__, name)
    return registry.add(Definition(cls, name))


def own(cls: type, name: str) -> Definition:
    """The definition ``cls`` owns for ``name``: an inherited one is copied first, so that
    changing it (prepending a step, adding a callback) leaves the parent's alone."""
    found = registry.find(cls, name)
    if found is None:
        return registry.add(Definition(cls, name))
    if found.actor_class is cls:
        return found
    return registry.add(found.copy_for(cls))


def definition(actor_class: type, name: str) -> Definition:
    """The definition ``actor_class`` owns for ``name``, to add steps or callbacks to it from
    outside the class body; an inherited definition is copied for the subclass first."""
    return own(actor_class, name)
