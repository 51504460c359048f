"""The completion webhook's answers and its body: refusals with a JSON reason, and the
parsing and validation that turn raw bytes into a ``Completion`` or a 4xx that says what
is wrong (never a 5xx). ``CompletionRequest`` is the body's schema: it validates the body
and is the OpenAPI document's description of it (``app.api.openapi``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NoReturn, TypeVar

from flask import jsonify
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError
from werkzeug.wrappers import Response

from engine import status

from .. import schemas
from ..schemas import MAX_ID, JsonObject, Name, Text, finite_float, json_type, refuse_constant

MAX_NOTE = 10_000
MAX_NAME = 255


def reply(code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    response = jsonify(body)
    response.status_code = code
    response.headers["Cache-Control"] = "no-store"
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


class Refusal(Exception):
    """A delivery refused with a 4xx (or 503) JSON answer that says what is wrong."""

    def __init__(
        self, code: int, error: str, message: str, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(message)
        self.code, self.error, self.message = code, error, message
        self.headers = headers or {}
        self.extra = extra

    def response(self) -> Response:
        return reply(self.code, {"error": self.error, "message": self.message, **self.extra}, self.headers)


def refuse(code: int, error: str, message: str, **extra: Any) -> NoReturn:
    raise Refusal(code, error, message, **extra)


def parse(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        refuse(400, "malformed_json", "the body is not UTF-8 text: send a JSON object")
    if not text.strip():
        refuse(400, "malformed_json", "the body is empty: send a JSON object")
    try:
        return json.loads(text, parse_constant=refuse_constant, parse_float=finite_float)
    except RecursionError:
        refuse(400, "malformed_json", "the body is not valid JSON: it nests too deeply")
    except ValueError as error:
        refuse(400, "malformed_json", f"the body is not valid JSON: {error}")


# --- the completion's fields -------------------------------------------------------------------

#: The statuses a completion may give, in the order its messages list them.
COMPLETIONS = tuple(sorted(status.COMPLETIONS))
CompletionStatus = Literal[COMPLETIONS]  # type: ignore[valid-type]


def _short_digits(value: str | int) -> str | int:
    if isinstance(value, int) and len(str(value)) > MAX_NAME:
        raise PydanticCustomError("invalid", f"must be at most {MAX_NAME} characters (as digits)")
    return value


ActorId = Annotated[
    Annotated[Name, Field(min_length=1, max_length=MAX_NAME)] | int, AfterValidator(_short_digits)
]


class CompletionRequest(BaseModel):
    """Give action_id, or actor_type + actor_id + name (the lane's current outbound action)."""

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
        description="This completion's id: the same in every retry, a new one per completion",
    )
    action_id: int | None = Field(None, ge=1, le=MAX_ID, description="The outbound action to complete")
    actor_type: Name | None = Field(None, min_length=1, max_length=MAX_NAME)
    actor_id: ActorId | None = Field(None, description="A string, or an integer taken as its digits")
    name: Name | None = Field(None, min_length=1, max_length=MAX_NAME, description="The action's name")
    status: CompletionStatus
    note: Text | None = Field(None, max_length=MAX_NOTE, description="Why: kept in the history and audit")
    payload: JsonObject | None = Field(None, description="Kept as the action's result")


class CompletionResult(BaseModel):
    """The answer to a delivery that reached the engine (kept, and sent again to every
    later delivery of its id)."""

    id: str
    completed: bool = Field(description="false: it was completed before")
    #: A str, not a Literal: a reason the engine adds later must not turn an answer into a 500.
    reason: str = Field(description="completed, or already_completed")
    action_id: int
    requested_status: CompletionStatus
    action_status: str | None = Field(description="The action's status after the delivery")


LANE_FIELDS = ("actor_type", "actor_id", "name")

REQUIRED = {
    "id": "is required: a unique id of this completion, the same in every retry",
    "status": f"is required: one of {', '.join(COMPLETIONS)}",
}


@dataclass(frozen=True)
class Completion:
    id: str
    to: str
    note: str | None
    payload: dict[str, Any] | None
    action_id: int | None
    lane: tuple[str, str, str] | None


def validate(body: Any) -> Completion:
    """The completion the body describes, or 422 naming every field that is wrong."""
    request, lane = checked(body, CompletionRequest, REQUIRED, "id, status")
    return Completion(
        id=request.id,
        to=request.status,
        note=request.note,
        payload=request.payload,
        action_id=request.action_id,
        lane=lane,
    )


M = TypeVar("M", bound=BaseModel)


def checked(
    body: Any, model: type[M], required: dict[str, str], essentials: str, lane_means: str | None = None
) -> tuple[M, tuple[str, str, str] | None]:
    """``body`` validated by ``model`` (a webhook's request: an ``id``, its ``essentials``,
    and ``action_id`` or actor_type + actor_id + name), and the lane it names when it has no
    action_id; or a 422 naming every field that is wrong (``required`` says how to fix a
    missing one, ``lane_means`` what actor + name address)."""
    if not isinstance(body, dict):
        refuse(
            422,
            "invalid_fields",
            f"the body must be a JSON object with {essentials} and action_id (or actor_type, actor_id "
            f"and name), not {json_type(body)}",
            fields={},
        )
    given = {key: value for key, value in body.items() if value is not None}  # null: not given
    problems: dict[str, str] = {}
    request: M | None = None
    fields = tuple(model.model_fields)
    try:
        request = model.model_validate(given)
    except ValidationError as failure:
        problems = schemas.problems(
            failure,
            model,
            missing=lambda field: required.get(field, "is required"),
            unknown=lambda field: f"is not a field: the fields are {', '.join(fields)}",
        )
    for field, problem in address_problems(given).items():
        problems[field] = problem if lane_means is None else problem.replace(LANE_MEANS, lane_means)
    if problems or request is None:
        listed = "; ".join(f"{k} {v}" for k, v in problems.items())
        missing = any(v.startswith("is required") for v in problems.values())
        refuse(422, "missing_fields" if missing else "invalid_fields", listed, fields=problems)
    if getattr(request, "action_id", None) is not None:
        return request, None
    lane = tuple(str(getattr(request, key)) for key in LANE_FIELDS)
    return request, (lane[0], lane[1], lane[2])


#: What actor_type + actor_id + name address in a completion (a signal says its own).
LANE_MEANS = "outbound action current in that lane"


def address_problems(given: dict[str, Any]) -> dict[str, str]:
    """The rule the model's ``oneOf`` states: action_id, or all three of actor_type,
    actor_id and name, never both."""
    by_lane = [key for key in LANE_FIELDS if key in given]
    if "action_id" in given:
        if by_lane:
            return {
                "action_id": "give either action_id or actor_type, actor_id and name (the lane's "
                "current outbound action), not both"
            }
        return {}
    if not by_lane:
        return {
            "action_id": "is required, unless actor_type, actor_id and name address the outbound "
            "action current in that lane"
        }
    return {
        key: "is required with " + " and ".join(k for k in LANE_FIELDS if k != key)
        for key in LANE_FIELDS
        if key not in given
    }
