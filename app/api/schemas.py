"""The JSON API's answers, as pydantic models; the query parameters each list accepts are
in ``app/api/parameters.py``, the schedules' answers in ``app/api/schedule_schemas.py``.
``app/api/openapi.py`` generates the OpenAPI document from these models and the webhook's, so
the document cannot drift from what is checked; a test validates real answers against it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine import status

ActionStatus = Literal[status.ACTION_STATUSES]  # type: ignore[valid-type]
StepStatus = Literal[status.STEP_STATUSES]  # type: ignore[valid-type]


# --- answers -----------------------------------------------------------------------------------

Time = Annotated[datetime | None, Field(description="UTC")]


class Answer(BaseModel):
    """An answer's schema: a field without a default is always there (null when it has no
    value); the views build the answers as plain JSON, and a test checks them against these."""


class Error(BaseModel):
    """Every error is JSON: a code and a sentence."""

    error: str = Field(description="A code, e.g. bad_signature, not_found")
    message: str = Field(description="What is wrong, in words")
    parameter: str | None = Field(None, description="The query parameter at fault (400)")
    field: str | None = Field(None, description="The body's field at fault (400 invalid_field)")
    fields: dict[str, str] | None = Field(None, description="Each field at fault, with what is wrong (422)")
    action_id: int | None = Field(None, description="The action meant (409 not_current)")


class NotSignedIn(BaseModel):
    """The answer to a request without a signed-in session (401): where to sign in."""

    error: Literal["not signed in"]
    login: str = Field(description="The sign-in page")


class ActionSummary(Answer):
    """An action's summary fields: in the lists, and in each node of a tree."""

    id: int
    name: str
    actor_type: str
    actor_id: str
    status: ActionStatus
    outbound: bool
    started_at: Time
    completed_at: Time


class ErrorSummary(Answer):
    """An action's error: its exception's class and message."""

    model_config = ConfigDict(populate_by_name=True)

    error_class: str = Field(alias="class")
    message: str | None
    traceback: str | None = Field(None, description="Only on GET /api/actions/{action_id}")


class ActionLinks(Answer):
    self: str
    tree: str


class Action(ActionSummary):
    arguments: list[Any] = Field(description="The arguments, as stored (JSON)")
    root: bool = Field(description="Invoked without a parent step")
    tree_id: int | None = Field(description="The root of the tree it belongs to")
    concurrency_key: str = Field(description="Its lane")
    checksum_key: str | None
    checksum: str | None
    current_step_index: int | None
    timeout_seconds: float | None = Field(description="Seconds, with their fraction")
    deadline_at: Time
    superseded_by_id: int | None
    result: Any = Field(
        None,
        description="What it returned (its last step, a finish decision) or was completed with: JSON, "
        'with actors, datetimes and decimals as {"__stepwise__": kind, ...} objects',
    )
    error: ErrorSummary | None
    created_at: Time
    updated_at: Time
    links: ActionLinks


class Step(Answer):
    id: int
    index: int = Field(description="Which step of the definition (-1: a step running a compensation)")
    name: str | None = Field(description="The step's name, when the server knows the definition")
    visit: int = Field(description="Which run of this step (a decision may go back to it)")
    result: Any = Field(None, description="What its body returned (JSON, as the action's result)")
    decision: dict[str, Any] | None = Field(
        description='{"go_to": name}, {"finish": true} or {"fail": reason}'
    )
    status: StepStatus
    attempt: int
    retry_at: Time
    pending_actions_count: int
    unsuccessful_actions_count: int
    started_at: Time
    performed_at: Time
    completed_at: Time
    children: list[int] = Field(description="Ids of the actions the step waited on")


class Parent(Answer):
    action_id: int
    step_id: int
    step_index: int


class AttemptError(Answer):
    event: Literal["attempt_failed", "step_errored", "step_failed", "callback_failed", "completed"]
    at: Time
    step_id: int | None
    attempt: int | None
    next_attempt_at: str | None
    error_class: str | None
    error_message: str | None
    traceback: str | None


class InboxSignal(Answer):
    id: int
    name: str
    payload: Any = Field(None, description="JSON, as sent")
    sent_by: str | None
    note: str | None
    sent_at: Time
    consumed_at: Time = Field(description="null: still in the inbox")
    consumed_by_wait_id: int | None


class SignalWait(Answer):
    id: int = Field(description="The wait (an invocation)")
    step_id: int | None
    signals: list[str] = Field(description="It is satisfied by any one of these")
    since: Time
    until: Time = Field(description="Its deadline; null: none")


class CompensationEntry(Answer):
    id: int
    name: str = Field(description="The action that undoes the step")
    actor_type: str
    actor_id: str
    status: Literal[status.COMPENSATION_STATUSES]  # type: ignore[valid-type]
    sequence: int | None = Field(description="Its turn (1 runs first) once the action compensates")
    undoes_step_id: int = Field(description="The step whose work it undoes")
    step_id: int | None = Field(description="The step that runs it (index -1), once started")
    error_class: str | None = Field(description="Why it could not start")


class DurableAttempt(Answer):
    """One attempt of a step that declares heartbeat_timeout, attempt_timeout or recover."""

    id: int
    step_id: int
    attempt: int
    outcome: Literal["succeeded", "failed", "timed_out", "lost", "discarded"] | None = Field(
        description="null: still running"
    )
    worker: str | None = Field(description="host:pid of the worker that ran it")
    enqueued_at: Time = Field(description="When it became due")
    started_at: Time
    heartbeat_at: Time = Field(description="Its last heartbeat")
    progress: float | str | None = Field(description="The last heartbeat's progress: 0..1 or a short text")
    checkpoint: Any = Field(None, description="The last checkpoint (JSON), where a retry resumes")
    lost_at: Time = Field(description="Without a heartbeat by then it is lost")
    deadline_at: Time = Field(description="Its attempt_timeout runs out then")
    ended_at: Time
    error_class: str | None
    error_message: str | None


class StartedByLinks(Answer):
    schedule: str = Field(description="The schedule in this API")
    page: str = Field(description="The studio's page of the schedule")


class StartedBy(Answer):
    """The schedule tick that started the action (a root), as its page says "Started by schedule"."""

    schedule_id: int
    schedule: str = Field(description="The schedule's name")
    tick_id: int = Field(description="The tick: one of the schedule's runs")
    due_at: Time = Field(description="When the tick was due (a manual run: when it was asked for)")
    local: str = Field(description="due_at in the schedule's time zone")
    timezone: str
    manual: bool = Field(description="Triggered by hand")
    by: str | None = Field(description="Who triggered it by hand")
    links: StartedByLinks


class ActionDetail(Action):
    started_by: StartedBy | None = Field(description="The schedule tick that started it; null: none did")
    steps: list[Step]
    compensations: list[CompensationEntry] = Field(
        description="What its steps registered to undo their work, in turn, and their progress"
    )
    inbox: list[InboxSignal] = Field(description="Every signal sent to it, oldest first")
    waits: list[SignalWait] = Field(description="Its waits for signals not yet satisfied")
    parents: list[Parent] = Field(description="The steps that waited on it (several when reuse attached it)")
    errors: list[AttemptError] = Field(description="Every error in its history, oldest first")
    attempts: list[DurableAttempt] = Field(
        description="Its durable attempts (of steps with heartbeat_timeout, attempt_timeout or recover)"
    )


class ActionPage(Answer):
    actions: list[Action]
    limit: int
    next: str | None = Field(description="The next page's URL; null on the last page")


class TreeStep(Answer):
    id: int
    index: int
    status: StepStatus
    children: list[TreeNode]


class TreeNode(BaseModel):
    """An action with its steps and their children. An action reached twice is shown in
    full once, then as {"id", "name", "status", "repeated": true}; one cut off (too many
    nodes, too deep) as {"id", "truncated": true}."""

    id: int
    name: str | None = None
    actor_type: str | None = None
    actor_id: str | None = None
    status: ActionStatus | None = None
    outbound: bool | None = None
    started_at: Time = None
    completed_at: Time = None
    error: ErrorSummary | None = None
    repeated: bool | None = None
    truncated: bool | None = None
    steps: list[TreeStep] | None = None


class Tree(Answer):
    tree: TreeNode
    nodes: int = Field(description="Actions loaded")
    truncated: bool


class CurrentAction(ActionSummary):
    deadline_at: Time


class LaneLinks(Answer):
    current: str
    actions: str


class Lane(Answer):
    id: int
    concurrency_key: str
    created_at: Time
    current: CurrentAction | None
    waiting_for_completion: bool = Field(
        description="Its current action is outbound: the lane moves when it is completed"
    )
    queued: int = Field(description="Pending actions behind the current one")
    links: LaneLinks


class LanePage(Answer):
    lanes: list[Lane]
    limit: int
    next: str | None = Field(description="The next page's URL; null on the last page")


TreeStep.model_rebuild()
