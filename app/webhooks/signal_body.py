"""The signal webhook's body: ``SignalRequest`` validates it (and describes it in the
OpenAPI document); ``validate`` turns it into a ``SignalDelivery`` or a 422 naming each
field that is wrong. Signing, timestamps and the answers are the completion webhook's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.signal import NAME_LENGTH

from ..schemas import MAX_ID, JsonObject, Name, Text
from .body import MAX_NAME, MAX_NOTE, ActorId, checked


class SignalRequest(BaseModel):
    """Give action_id, or actor_type + actor_id + name (that actor's newest action of that name)."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={
            "oneOf": [{"required": ["action_id"]}, {"required": ["actor_type", "actor_id", "name"]}],
            "additionalProperties": False,
        },
    )

    id: Name = Field(
        min_length=1,
        max_length=MAX_NAME,
        description="This delivery's id: the same in every retry (it is consumed once), a new one per signal",
    )
    signal: Name = Field(
        min_length=1, max_length=NAME_LENGTH, description='The signal\'s name, e.g. "approved"'
    )
    action_id: int | None = Field(None, ge=1, le=MAX_ID, description="The action the signal is for")
    actor_type: Name | None = Field(None, min_length=1, max_length=MAX_NAME)
    actor_id: ActorId | None = Field(None, description="A string, or an integer taken as its digits")
    name: Name | None = Field(None, min_length=1, max_length=MAX_NAME, description="The action's name")
    note: Text | None = Field(None, max_length=MAX_NOTE, description="Why: kept with the signal")
    payload: JsonObject | None = Field(None, description="What the waiting step receives")


class SignalResult(BaseModel):
    """The answer to a signal delivery that reached the engine."""

    id: str
    signal_id: int
    signal: str
    action_id: int
    consumed: bool = Field(description="false: kept in the action's inbox until a step waits for it")
    replayed: bool = Field(description="true: this id was delivered before; nothing new was recorded")


REQUIRED = {
    "id": "is required: a unique id of this signal, the same in every retry",
    "signal": 'is required: the signal\'s name, e.g. "approved"',
}


@dataclass(frozen=True)
class SignalDelivery:
    id: str
    name: str
    note: str | None
    payload: dict[str, Any] | None
    action_id: int | None
    lane: tuple[str, str, str] | None


def validate(body: Any) -> SignalDelivery:
    """The signal the body describes, or 422 naming every field that is wrong."""
    request, lane = checked(
        body, SignalRequest, REQUIRED, "id, signal", "newest action of that name on that actor"
    )
    return SignalDelivery(
        id=request.id,
        name=request.signal,
        note=request.note,
        payload=request.payload,
        action_id=request.action_id,
        lane=lane,
    )
