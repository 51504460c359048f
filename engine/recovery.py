"""Recovery steps: a step that declares ``recover="name"`` goes to that step once its
retries are exhausted, instead of failing its action.

The failed step keeps what led there in its decision (``{"go_to": name, "failure": …}``):
the error's class and message, the attempt, and whether that attempt may have run its
side effect (its start was recorded durably before the body ran: engine/attempt.py) or
certainly did not (no attempt was ever started: the actor or the definition was gone).
The recovery step reads it as ``step.failure``; the history has a ``recovering`` event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from . import attempt, history
from .errors import ActorNotFound, ArgumentError, UnknownAction

if TYPE_CHECKING:
    from .action import Action
    from .step import Step


@dataclass(frozen=True)
class Failure:
    """What made the step before a recovery step fail (``step.failure``)."""

    #: The error's class (``module.Name``) and message.
    error_class: str | None
    message: str | None
    #: The number of the attempt that failed last.
    attempt: int
    #: True when that attempt's start was recorded before its body ran: it raised, timed
    #: out or was lost, and its side effect may have happened. False when it certainly did
    #: not run (it was never started: the actor or the definition was gone).
    may_have_run: bool
    #: The failed step's name.
    step: str | None
    #: How it ended: "failed", "timed_out", "lost", or "not_started".
    outcome: str

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> Failure:
        return cls(
            error_class=data.get("class"),
            message=data.get("message"),
            attempt=int(data.get("attempt") or 0),
            may_have_run=bool(data.get("may_have_run")),
            step=data.get("step"),
            outcome=str(data.get("outcome") or ""),
        )


def recovering(session: Session, action: Action, step: Step) -> tuple[dict[str, Any], int] | None:
    """The decision (go to the recovery step) and its target index, when the failed
    ``step`` declares ``recover=``; None otherwise (no query: read from the code)."""
    try:
        definition = action.definition
        options = attempt.options_of(definition, step.definition_index)
        if options is None or options.recover is None:
            return None
        target = definition.step_index(options.recover)
    except (ActorNotFound, UnknownAction, ArgumentError):
        return None  # gone, or an unknown name: the action fails as it would without it
    failure = _failure(session, action, step)
    history.record(session, action, "recovering", step_id=step.id, to=options.recover, **failure)
    step.decision = {"go_to": options.recover, "failure": failure}
    return {"go_to": options.recover}, target


def failure_of(decision: dict[str, Any] | None) -> Failure | None:
    """The failure a step's decision carries (None: it did not fail into a recovery)."""
    stored = (decision or {}).get("failure")
    return Failure.from_stored(stored) if isinstance(stored, dict) else None


def _failure(session: Session, action: Action, step: Step) -> dict[str, Any]:
    last = session.execute(
        select(attempt.Attempt.outcome, attempt.Attempt.error_class, attempt.Attempt.error_message).where(
            attempt.Attempt.step_id == step.id, attempt.Attempt.attempt == step.attempt
        )
    ).first()
    names = action.definition.step_names()
    name = names[step.definition_index] if step.definition_index < len(names) else None
    if step.unsuccessful_actions_count and last is not None and last.outcome == attempt.SUCCEEDED:
        # The body ran; its children failed.
        children = f"{step.unsuccessful_actions_count} of its children did not succeed"
        return _data(None, children, step.attempt, True, name, "children_failed")
    error_class = (last.error_class if last is not None else None) or action.error_class
    message = (last.error_message if last is not None else None) or action.error_message
    outcome = str(last.outcome or attempt.FAILED) if last is not None else "not_started"
    return _data(error_class, message, step.attempt, last is not None, name, outcome)


def _data(
    error_class: str | None,
    message: str | None,
    number: int,
    may_have_run: bool,
    name: str | None,
    outcome: str,
) -> dict[str, Any]:
    return {
        "class": error_class,
        "message": message,
        "attempt": number,
        "may_have_run": may_have_run,
        "step": name,
        "outcome": outcome,
    }
