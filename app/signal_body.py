"""The signal webhook's body: ``SignalRequest`` validates it (and describes it in the
OpenAPI document); ``validate`` turns it into a ``SignalDelivery`` or a 422 naming each
field that is wrong. Signing, timestamps and the answers are the completion webhook's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.signal import NAME_LENGTH

from . import schemas
from .schemas import MAX_ID, JsonObject, Name, Text, json_type
from .webhook_body import LANE_FIELDS, MAX_NAME, MAX_NOTE, ActorId, address_problems, refuse


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


FIELDS = tuple(SignalRequest.model_fields)
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
    if not isinstance(body, dict):
        refuse(
            422,
            "invalid_fields",
            f"the body must be a JSON object with id, signal and action_id (or actor_type, actor_id "
            f"and name), not {json_type(body)}",
            fields={},
        )
    given = {key: value for key, value in body.items() if value is not None}
    problems: dict[str, str] = {}
    request: SignalRequest | None = None
    try:
        request = SignalRequest.model_validate(given)
    except ValidationError as failure:
        problems = schemas.problems(
            failure,
            SignalRequest,
            missing=lambda field: REQUIRED.get(field, "is required"),
            unknown=lambda field: f"is not a field: the fields are {', '.join(FIELDS)}",
        )
    problems.update(
        {
            k: v.replace("outbound action current in that lane", "newest action of that name on that actor")
            for k, v in address_problems(given).items()
        }
    )
    if problems or request is None:
        listed = "; ".join(f"{k} {v}" for k, v in problems.items())
        missing = any(v.startswith("is required") for v in problems.values())
        refuse(422, "missing_fields" if missing else "invalid_fields", listed, fields=problems)
    lane = None
    if request.action_id is None:
        assert request.actor_type is not None and request.actor_id is not None and request.name is not None
        lane = (request.actor_type, str(request.actor_id), request.name)
    assert set(LANE_FIELDS) <= set(FIELDS)
    return SignalDelivery(
        id=request.id,
        name=request.signal,
        note=request.note,
        payload=request.payload,
        action_id=request.action_id,
        lane=lane,
    )
