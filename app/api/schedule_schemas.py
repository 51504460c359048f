"""The JSON API's schedule schemas, as pydantic models: the bodies the schedule commands
take (``ScheduleCreate``, ``ScheduleEdit``, ``ScheduleCommand``) and the answers. As the
rest of ``app/api/schemas.py``, they generate the OpenAPI document (``app/api/openapi.py``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.schedules import manage as schedule_manage
from engine.schedules import rule as schedule_rule
from engine.schedules import tables as schedule_tables

from ..schemas import JsonArray, Name, Text
from ..webhooks.body import MAX_NAME, ActorId
from .schemas import ActionStatus, Answer, Time

MissedPolicy = Literal[schedule_tables.MISSED_POLICIES]  # type: ignore[valid-type]
OverlapPolicy = Literal[schedule_tables.OVERLAP_POLICIES]  # type: ignore[valid-type]
#: The longest interval accepted, in seconds (ten years, as engine.schedules.rule says).
MAX_EVERY = 3660 * 86400


class ScheduleBody(BaseModel):
    """A schedule command's JSON body: an unknown field is refused, types are not coerced."""

    model_config = ConfigDict(strict=True, extra="forbid")


class ScheduleCommand(ScheduleBody):
    """The body of pause, resume, trigger and delete (optional: {} or none at all)."""

    reason: Text | None = Field(None, max_length=500, description="Why, for the audit")


class ScheduleCreate(ScheduleCommand):
    """A new schedule: ``cron`` (read in ``timezone``) or ``every``, not both."""

    name: Name = Field(min_length=1, max_length=schedule_manage.MAX_NAME, description="Unique")
    cron: Text | None = Field(
        None,
        max_length=schedule_rule.MAX_CRON,
        description="Five fields (minute hour day month weekday), six with seconds first, or @daily…",
    )
    every: int | None = Field(None, ge=1, le=MAX_EVERY, description="An interval in seconds, instead of cron")
    timezone: Name = Field(schedule_rule.DEFAULT_TIMEZONE, max_length=64, description="An IANA time zone")
    actor_type: Name = Field(min_length=1, max_length=MAX_NAME)
    actor_id: ActorId = Field(description="A string, or an integer taken as its digits")
    action: Name = Field(min_length=1, max_length=MAX_NAME)
    arguments: JsonArray = Field(default_factory=list, description="The action's arguments")
    missed: MissedPolicy = Field(schedule_tables.SKIP, description="After downtime: skip, or run_once")
    overlap: OverlapPolicy = Field(schedule_tables.SKIP, description="While the last run goes: skip or allow")


class ScheduleEdit(ScheduleCommand):
    """The fields to change; the others stay. Giving ``cron`` or ``every`` sets the rule: the
    one given replaces the other (send the other as null or leave it out)."""

    cron: Text | None = Field(None, max_length=schedule_rule.MAX_CRON, description="A new cron expression")
    every: int | None = Field(None, ge=1, le=MAX_EVERY, description="A new interval in seconds")
    timezone: Name | None = Field(None, max_length=64, description="A new IANA time zone")
    arguments: JsonArray | None = Field(None, description="New arguments")
    missed: MissedPolicy | None = None
    overlap: OverlapPolicy | None = None


class ScheduleRun(Answer):
    """One tick of a schedule: fired (with what it started), skipped (overlap) or missed."""

    id: int
    due_at: Time = Field(description="When the tick was due (a manual run: when it was asked for)")
    fired_at: Time
    outcome: Literal[schedule_tables.FIRED, schedule_tables.SKIPPED, schedule_tables.MISSED]  # type: ignore[valid-type]
    manual: bool = Field(description="Triggered by hand")
    by: str | None = Field(description="Who triggered it by hand")
    invocation_id: int | None
    action_id: int | None = Field(description="The action it started, once a worker admitted it")
    action_status: ActionStatus | None
    lag_seconds: float
    missed_count: int = Field(description="Earlier ticks, missed while no clock ran, this run stands for")
    note: str | None


class UpcomingTick(Answer):
    at: Time
    local: str = Field(description="The same instant in the schedule's time zone")


class ScheduleLinks(Answer):
    self: str
    page: str = Field(description="The studio's page of the schedule")


class Schedule(Answer):
    id: int
    name: str
    rule: str = Field(description='The rule in words: "At 02:00 every day (Europe/Paris)"')
    cron: str | None
    every_seconds: int | None
    timezone: str
    actor_type: str
    actor_id: str
    action: str
    arguments: list[Any]
    missed: MissedPolicy
    overlap: OverlapPolicy
    source: Literal[schedule_tables.CODE, schedule_tables.OPERATOR] = Field(  # type: ignore[valid-type]
        description="code: declared with engine.schedule (edited in the code); operator: the API, studio, CLI"
    )
    paused: bool
    paused_at: Time
    paused_by: str | None
    next_fire_at: Time
    upcoming: list[UpcomingTick] = Field(description="The next three ticks; none while paused")
    runs: list[ScheduleRun] = Field(description="The last runs, newest first (5 in the list, 50 alone)")
    created_at: Time
    updated_at: Time
    links: ScheduleLinks


class ScheduleList(Answer):
    schedules: list[Schedule] = Field(description="By name")
    truncated: bool = Field(description="More schedules exist than the list holds (500)")


class ScheduleChanged(Answer):
    """The answer to pause and resume: changed is false when it was so already."""

    changed: bool
    schedule: Schedule


class FieldChange(Answer):
    before: Any
    after: Any


class ScheduleEdited(Answer):
    changed: bool = Field(description="false: the schedule was so already")
    changes: dict[str, FieldChange] = Field(description="Each field changed (as stored: every_seconds)")
    schedule: Schedule


class ScheduleTriggered(Answer):
    run: ScheduleRun
    schedule: Schedule


class ScheduleDeleted(Answer):
    deleted: str = Field(description="The schedule's name")
