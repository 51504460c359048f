"""Why a lane is not moving, in words: the reasons the lanes page gives for its current
action (pending, a step not run yet, a retry due, waiting on children and waits, an outbound
completion, a timeout), each with the actions it names as links. It only reads what the
lanes' read model (``queries``) and the deadlock finder (``queries_deadlocks``) loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from engine import clock, registry, status, sweeper
from engine.definition import Definition
from engine.errors import EngineError
from engine.models import Action, Invocation, Step

from ..views import timestamp

#: Children (and waits) named per reason before "and N more".
CHILDREN_SHOWN = 5


@dataclass
class Link:
    """An action (or a wait, ``action_id`` None) named in a reason, linked on the page."""

    label: str
    action_id: int | None = None
    status: str | None = None
    #: The lane a pending child waits in, linked too.
    lane: str | None = None

    def __str__(self) -> str:
        text = f"{self.label} #{self.action_id}" if self.action_id is not None else self.label
        if self.status is not None:
            text += f" ({self.status}{f' in lane {self.lane}' if self.lane else ''})"
        return text


@dataclass
class Reason:
    """One reason a lane is not moving: ``text`` says it, ``links`` follow it on the page."""

    kind: str
    text: str
    at: datetime | None = None
    links: list[Link] = field(default_factory=list)
    joiner: str = ", "
    #: Links not shown ("and N more").
    more: int = 0

    @property
    def sentence(self) -> str:
        """The whole reason as plain text, links included."""
        parts = [self.text]
        if self.links:
            parts.append(self.joiner.join(str(link) for link in self.links))
        if self.more:
            parts.append(f"and {self.more} more")
        return " ".join(parts)


# --- the current action's progress -----------------------------------------------------------


def progress(
    action: Action, step: Step | None, children: list[tuple[Invocation, Action | None]]
) -> list[Reason]:
    """Why the current action has not completed yet: what its current step waits for."""
    if action.status == status.PENDING:
        return [
            Reason(
                "pending",
                f"its current action is pending since {timestamp(action.created_at)}: it starts when a "
                "worker admits it",
                at=action.created_at,
            )
        ]
    if action.status != status.PERFORMING:
        return [Reason("finishing", f"its current action is {action.status}; the lane is moving on")]
    if step is None:
        return [Reason("finishing", "its current action has no open step yet; it is moving on")]
    name = step_name(action, step.definition_index)
    if step.status == status.STEP_PERFORMING and step.performed_at is None:
        if step.retry_at is not None:
            attempts = _max_attempts(action)
            of = f" of {attempts}" if attempts else ""
            return [
                Reason(
                    "retry",
                    f"retry of {name} due at {timestamp(step.retry_at)} (attempt {step.attempt}{of})",
                    at=step.retry_at,
                )
            ]
        opened = step.created_at
        if clock.now() - opened > sweeper.GRACE:
            why = "a worker may have died; the sweeper re-sends after the grace period"
        else:
            why = "queued for a worker; the sweeper re-sends it if no worker runs it within the grace period"
        return [Reason("unrun", f"{name} body not run yet since {timestamp(opened)} ({why})", at=opened)]
    if step.status == status.STEP_PERFORMING:
        if step.pending_actions_count > 0:
            return [_waiting_reason(step, children)]
        return [Reason("finishing", f"{name} has run; the action is moving on")]
    if step.status == status.STEP_SUCCEEDED and action.outbound:
        since = step.completed_at or action.started_at
        return [
            Reason(
                "outbound",
                f"waiting for an outbound completion since {timestamp(since)} (a webhook, an operator's "
                "approval or engine.complete completes it)",
                at=since,
            )
        ]
    return [Reason("finishing", f"{name} {step.status}; the action is completing")]


def _waiting_reason(step: Step, children: list[tuple[Invocation, Action | None]]) -> Reason:
    count = step.pending_actions_count
    shown = children[:CHILDREN_SHOWN]
    links: list[Link] = []
    for invocation, child in shown:
        if invocation.kind == "wait":
            due = timestamp(invocation.due_at)
            links.append(Link(f"a wait until {due}"))
        elif child is not None:
            lane = child.concurrency_key if child.status == status.PENDING else None
            links.append(Link(child.name, child.id, child.status, lane))
        elif invocation.error_class:
            error = invocation.error_class.rsplit(".", 1)[-1]
            links.append(Link(f"{invocation.name} (not admitted: {error}: {invocation.error_message})"))
        else:
            links.append(
                Link(f"{invocation.name} (not admitted yet, requested {timestamp(invocation.created_at)})")
            )
    text = "waiting on " + _how_many(shown, count) + ":"
    return Reason("children", text, links=links, more=max(0, count - len(shown)))


def _how_many(shown: list[tuple[Invocation, Action | None]], count: int) -> str:
    """``2 child actions and 1 wait``, or ``8 child actions`` when only some are shown."""
    waits = sum(1 for invocation, _ in shown if invocation.kind == "wait")
    children = len(shown) - waits
    if len(shown) < count:
        return f"{count} child actions" + (" and waits" if waits else "")
    parts = []
    if children or not waits:
        parts.append(f"{children} child action{'s' if children != 1 else ''}")
    if waits:
        parts.append(f"{waits} wait{'s' if waits != 1 else ''}")
    return " and ".join(parts)


def timeout(action: Action) -> list[Reason]:
    deadline = action.deadline_at
    if deadline is None or action.status != status.PERFORMING:
        return []
    if deadline >= clock.now():
        return [Reason("timeout", f"timeout due at {timestamp(deadline)}", at=deadline)]
    return [
        Reason(
            "timeout",
            f"timeout due at {timestamp(deadline)}, passed (its job is late; the sweeper re-sends it after "
            "the grace period)",
            at=deadline,
        )
    ]


# --- naming ---------------------------------------------------------------------------------


def definition_of(action: Action) -> Definition | None:
    """The action's definition if this process knows it; reading never registers one."""
    try:
        cls = registry.actor_class(action.actor_type)
    except EngineError:
        return None
    return registry.find(cls, action.name)


def step_name(action: Action, index: int) -> str:
    """``step 2 of 3 (launch)``: its number, and its function's name when the definition is
    known in this process (the studio imports the actor modules of STEPWISE_IMPORTS)."""
    definition = definition_of(action)
    steps = definition.all_steps() if definition is not None else []
    if index >= len(steps):
        return f"step {index + 1}"
    fn_name = getattr(steps[index], "__name__", "")
    label = f" ({fn_name})" if fn_name and fn_name not in ("<lambda>", "default_step") else ""
    return f"step {index + 1} of {len(steps)}{label}"


def _max_attempts(action: Action) -> int | None:
    definition = definition_of(action)
    return definition.retry.max_attempts if definition is not None else None
