"""The engine's exceptions: a small hierarchy whose messages name the ids involved
and say how to fix the problem."""

from __future__ import annotations


class EngineError(Exception):
    """Base class for every error raised by the engine."""


class ConfigurationError(EngineError):
    """Raised when the engine is used before it is configured, or configured wrongly."""


class UnknownAction(EngineError):
    """Raised when an action name is neither declared on an actor class nor a method of it."""

    def __init__(self, actor_class: str, name: str) -> None:
        super().__init__(
            f"{actor_class} has no action {name!r}: declare it with @action on {actor_class}, "
            f"or define a method named {name!r}"
        )
        self.actor_class = actor_class
        self.name = name


class NotAnActor(EngineError):
    """Raised when an object is used as an actor but is neither a persisted SQLAlchemy row
    nor a registered service object."""


class ActorNotFound(EngineError):
    """Raised when a stored actor reference no longer resolves to a row or a service."""


class ActorTypeTaken(EngineError):
    """Raised when a second, different class would be registered under an actor type that
    names another class (two modules' ``Order``): their stored rows would be mixed up."""


class ArgumentError(EngineError, TypeError):
    """Raised when action arguments cannot be stored as JSON, or an option is malformed."""


class InvalidTransition(EngineError):
    """Raised when a status change is not allowed by the state diagram in ``engine.status``."""


class Deadlock(EngineError):
    """Raised when an action would join the lane held by one of its own ancestors.

    The ancestor waits for the descendant and the descendant waits for the lane, so the
    tree could never move. Handled like any error in user code: the invocation ends
    ``deadlocked`` and its parent step fails.
    """


class DefinitionChanged(EngineError):
    """Raised when an action in flight is at a step its definition no longer has: a deploy
    removed it. The action fails with this error; its history keeps the steps it ran."""


class Stalled(EngineError):
    """Raised when the sweeper gives up on work it sent again ``sweeper.MAX_RESENDS`` times
    without progress. The work fails with it (stored on the action, or on the invocation
    that was never admitted); the message names the row, its last error and what to do."""


class SessionConflict(EngineError):
    """Raised when an engine call would wait for SQLite's write lock while another session
    of the same thread holds it, having written without committing: the thread would wait
    for itself until SQLite gives up (30 s, then "database is locked").

    Typical cause: a job writes through its own session, then calls
    ``engine.complete_action(action_id)``, which opens a session of its own.
    """


class NoPendingActions(EngineError):
    """Raised when a step is told a child concluded but it waits on nothing."""


class Failed(EngineError):
    """Raised (and recorded on the action) when a step body decided to fail its action
    (``step.fail(reason)``): the reason is its message. It is a decision, not an error of
    the body: the action is not retried."""


class LoopLimit(EngineError):
    """Raised (and recorded on the action) when a decision would run a step more often than
    its ``max_visits``: the loop fails the action instead of running forever."""


class SignalRefused(EngineError):
    """Raised when a signal cannot be delivered: its action does not exist, or is finished
    (a finished action takes no signals). Nothing is recorded. ``reason`` is
    ``"not_found"`` or ``"finished"``."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class Cancelled(EngineError):
    """Raised by ``step.heartbeat()`` when the running body should stop: its action is no
    longer performing (cancelled, timed out, completed from outside) or this attempt was
    closed (timed out, or considered lost after its heartbeats stopped). Clean up and let it
    propagate: the body's outcome is discarded. ``reason`` is the action's status, or
    ``"attempt_closed"``."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class AttemptTimedOut(EngineError):
    """Raised (and recorded on the action, the attempt and its history) when one attempt of
    a step body ran longer than its ``attempt_timeout``. It counts as a failed attempt: the
    retry policy decides what follows. ``attempt`` is its number."""

    def __init__(self, message: str, attempt: int) -> None:
        super().__init__(message)
        self.attempt = attempt


class HeartbeatTimedOut(AttemptTimedOut):
    """Raised (and recorded) when a running attempt sent no heartbeat for its
    ``heartbeat_timeout``: its worker was killed or hangs, and the attempt is considered
    lost. It counts as a failed attempt; the next one starts from the last checkpoint."""


class AttemptLost(EngineError):
    """Raised (and recorded) when an attempt whose start was recorded never concluded: its
    worker died while the body ran (found when the step's lease was free again)."""
