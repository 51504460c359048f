"""The completion webhook's answers and its body: refusals with a JSON reason, and the
parsing and validation that turn raw bytes into a ``Completion`` or a 4xx that says what
is wrong (never a 5xx)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, NoReturn

from flask import jsonify
from werkzeug.wrappers import Response

from engine import status

from . import queries_api

MAX_NOTE = 10_000
#: How deep a payload's objects and arrays may nest.
MAX_DEPTH = 32
MAX_NAME = 255
MAX_ID = queries_api.MAX_ID
#: Who the audit and the history say completed the action.

FIELDS = ("id", "action_id", "actor_type", "actor_id", "name", "status", "note", "payload")
LANE_FIELDS = ("actor_type", "actor_id", "name")


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


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large")
    return value


def parse(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        refuse(400, "malformed_json", "the body is not UTF-8 text: send a JSON object")
    if not text.strip():
        refuse(400, "malformed_json", "the body is empty: send a JSON object")
    try:
        return json.loads(text, parse_constant=_no_constants, parse_float=_finite)
    except RecursionError:
        refuse(400, "malformed_json", "the body is not valid JSON: it nests too deeply")
    except ValueError as error:
        refuse(400, "malformed_json", f"the body is not valid JSON: {error}")


# --- the completion's fields -------------------------------------------------------------------


@dataclass(frozen=True)
class Completion:
    id: str
    to: str
    note: str | None
    payload: dict[str, Any] | None
    action_id: int | None
    lane: tuple[str, str, str] | None


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def text_problem(value: str) -> str | None:
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (it holds an unpaired surrogate)"
    return None


def json_problem(value: Any, depth: int = 1) -> str | None:
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, dict | list):
        if depth > MAX_DEPTH:
            return f"must not nest more than {MAX_DEPTH} levels deep"
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            problem = (text_problem(key) if isinstance(key, str) else None) or json_problem(item, depth + 1)
            if problem is not None:
                return problem
    return None


def name_problem(value: Any, what: str) -> str | None:
    if not isinstance(value, str):
        return f"must be {what}, not {json_type(value)}"
    if not value.strip():
        return "must not be empty"
    if len(value) > MAX_NAME:
        return f"must be at most {MAX_NAME} characters"
    return text_problem(value)


def validate(body: Any) -> Completion:
    """The completion the body describes, or 422 naming every field that is wrong."""
    if not isinstance(body, dict):
        refuse(
            422,
            "invalid_fields",
            f"the body must be a JSON object with id, status and action_id (or actor_type, actor_id "
            f"and name), not {json_type(body)}",
            fields={},
        )
    problems: dict[str, str] = {}
    for key in sorted(set(body) - set(FIELDS)):
        problems[key[:80]] = f"is not a field: the fields are {', '.join(FIELDS)}"

    completion_id = body.get("id")
    if completion_id is None:
        problems["id"] = "is required: a unique id of this completion, the same in every retry"
    elif (problem := name_problem(completion_id, "a string")) is not None:
        problems["id"] = problem

    to = body.get("status")
    if to is None:
        problems["status"] = f"is required: one of {', '.join(sorted(status.COMPLETIONS))}"
    elif not isinstance(to, str) or to not in status.COMPLETIONS:
        shown = repr(to[:40]) if isinstance(to, str) else json_type(to)
        problems["status"] = f"must be one of {', '.join(sorted(status.COMPLETIONS))}, not {shown}"

    note = body.get("note")
    if note is not None:
        if not isinstance(note, str):
            problems["note"] = f"must be a string, not {json_type(note)}"
        elif len(note) > MAX_NOTE:
            problems["note"] = f"must be at most {MAX_NOTE:,} characters"
        elif (problem := text_problem(note)) is not None:
            problems["note"] = problem

    payload = body.get("payload")
    if payload is not None:
        if not isinstance(payload, dict):
            problems["payload"] = f"must be an object, not {json_type(payload)}"
        elif (problem := json_problem(payload)) is not None:
            problems["payload"] = problem

    action_id = body.get("action_id")
    by_lane = [k for k in LANE_FIELDS if body.get(k) is not None]
    lane: tuple[str, str, str] | None = None
    if action_id is not None:
        if isinstance(action_id, bool) or not isinstance(action_id, int):
            problems["action_id"] = f"must be an integer, not {json_type(action_id)}"
        elif not 1 <= action_id <= MAX_ID:
            problems["action_id"] = f"must be an action's id, between 1 and {MAX_ID}"
        if by_lane:
            problems["action_id"] = (
                "give either action_id or actor_type, actor_id and name (the lane's current "
                "outbound action), not both"
            )
    elif not by_lane:
        problems["action_id"] = (
            "is required, unless actor_type, actor_id and name address the outbound action "
            "current in that lane"
        )
    else:
        actor_id = body.get("actor_id")
        if isinstance(actor_id, int) and not isinstance(actor_id, bool):
            actor_id = str(actor_id)
        values: dict[str, Any] = {
            "actor_type": body.get("actor_type"),
            "actor_id": actor_id,
            "name": body.get("name"),
        }
        for key, value in values.items():
            if value is None:
                problems[key] = "is required with " + " and ".join(k for k in LANE_FIELDS if k != key)
            elif problem := name_problem(
                value, "a string" if key != "actor_id" else "a string or an integer"
            ):
                problems[key] = problem
        if not any(k in problems for k in LANE_FIELDS):
            lane = (values["actor_type"], values["actor_id"], values["name"])

    if problems:
        listed = "; ".join(f"{k} {v}" for k, v in problems.items())
        missing = any(v.startswith("is required") for v in problems.values())
        refuse(422, "missing_fields" if missing else "invalid_fields", listed, fields=problems)
    return Completion(
        id=str(completion_id),
        to=str(to),
        note=note,
        payload=payload,
        action_id=action_id,
        lane=lane,
    )
