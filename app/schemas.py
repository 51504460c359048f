"""Schemas: what the pydantic models of the webhook and the API share. A model's JSON schema
is both what its input is checked against and what the OpenAPI document says; ``problems``
turns pydantic's errors into one sentence per field, worded from that same schema.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

from flask import abort
from pydantic import AfterValidator, BaseModel, ValidationError
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import PydanticCustomError

#: How deep a JSON value's objects and arrays may nest.
MAX_DEPTH = 32
#: The largest id a BIGINT holds: a larger one names no row (and must not reach the database).
MAX_ID = 2**63 - 1


class Schemas(GenerateJsonSchema):
    """JSON schemas without a title on every field (the field's name says it)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def json_type(value: Any) -> str:
    """What a JSON value is, in words: "a string", "an array"…"""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
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
    """What is wrong with a JSON value: NUL characters, unpaired surrogates, or nesting
    deeper than ``MAX_DEPTH`` (checked without recursion past that depth)."""
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


def _checked(problem_of: Any) -> Any:
    def check(value: Any) -> Any:
        problem = problem_of(value)
        if problem is not None:
            raise PydanticCustomError("invalid", problem)
        return value

    return AfterValidator(check)


def _name_problem(value: str) -> str | None:
    return "must not be empty" if not value.strip() else text_problem(value)


#: Text without NUL characters or unpaired surrogates.
Text = Annotated[str, _checked(text_problem)]
#: A name: text that is not blank.
Name = Annotated[str, _checked(_name_problem)]
#: Any JSON object that nests at most ``MAX_DEPTH`` levels, without NULs in its strings.
JsonObject = Annotated[dict[str, Any], _checked(json_problem)]
#: Any JSON array, likewise.
JsonArray = Annotated[list[Any], _checked(json_problem)]


# --- pydantic's errors, in words -----------------------------------------------------------------


def _branches(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The non-null alternatives of a field's schema."""
    options = schema.get("anyOf") or schema.get("oneOf") or [schema]
    return [option for option in options if option.get("type") != "null"]


_KINDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "object": "an object",
    "array": "an array",
}


def expected(schema: dict[str, Any], detailed: bool = True) -> str:
    """What a value of this schema must be, in words: "one of a, b", "an integer from 1 to
    200", "a string or an integer" (only the JSON types, when not ``detailed``)."""
    parts = []
    for option in _branches(schema):
        if detailed and "enum" in option:
            parts.append("one of " + ", ".join(str(v) for v in option["enum"]))
        elif detailed and option.get("format") == "date-time":
            parts.append("an ISO 8601 time such as 2025-01-31T12:00:00Z")
        elif detailed and option.get("type") == "integer" and {"minimum", "maximum"} <= option.keys():
            parts.append(f"an integer from {option['minimum']} to {option['maximum']}")
        else:
            parts.append(_KINDS.get(option.get("type", ""), "a JSON value"))
    return " or ".join(dict.fromkeys(parts))


def _limit(schema: dict[str, Any], key: str) -> Any:
    return next((option[key] for option in _branches(schema) if key in option), None)


def quoted(value: Any) -> str:
    """A rejected value as a message quotes it: a string itself (cut), else its JSON type."""
    return repr(value[:40]) if isinstance(value, str) else json_type(value)


def message(error: Any, schema: dict[str, Any]) -> str:
    """One pydantic error on a field of a JSON body as a sentence without the field's name."""
    kind, value = error["type"], error.get("input")
    if kind == "invalid":  # a problem of our own (PydanticCustomError) carries its sentence
        return str(error["msg"])
    if kind == "string_unicode":
        return "must be valid Unicode (it holds an unpaired surrogate)"
    if kind in ("string_too_short", "too_short"):
        return "must not be empty"
    if kind in ("string_too_long", "too_long"):
        return f"must be at most {_limit(schema, 'maxLength'):,} characters"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        return f"must be between {_limit(schema, 'minimum')} and {_limit(schema, 'maximum')}"
    if kind in ("literal_error", "enum"):
        return f"must be {expected(schema)}, not {quoted(value)}"
    return f"must be {expected(schema, detailed=False)}, not {json_type(value)}"


def parameter_message(error: Any, schema: dict[str, Any]) -> str:
    """One pydantic error on a query parameter (always text) as a sentence."""
    if error["type"] == "invalid":
        return str(error["msg"])
    return f"must be {expected(schema)}, not {quoted(error.get('input'))}"


def problems(
    failure: ValidationError,
    model: type[BaseModel],
    *,
    missing: Callable[[str], str],
    unknown: Callable[[str], str],
    word: Callable[[Any, dict[str, Any]], str] = message,
) -> dict[str, str]:
    """Each field at fault with what is wrong with it, in the order pydantic found them:
    ``missing(field)`` and ``unknown(field)`` word a required field left out and a field
    the model does not have; ``word(error, field's schema)`` every other error."""
    properties = model.model_json_schema(schema_generator=Schemas).get("properties", {})
    found: dict[str, str] = {}
    for error in failure.errors():
        field = str(error["loc"][0])[:80] if error["loc"] else ""
        if field in found:
            continue  # one sentence per field (a union reports each of its branches)
        if error["type"] == "missing":
            found[field] = missing(field)
        elif error["type"] == "extra_forbidden":
            found[field] = unknown(field)
        else:
            found[field] = word(error, properties.get(field, {}))
    return found


def refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:40]} is too large a number")
    return value


def form_json(text: str | None, limit: int, unchanged: str) -> Any:
    """A form field's JSON value (None when blank), or a 400 that says what is wrong with it
    and ends with ``unchanged`` ("nothing was sent")."""
    if text is None or not text.strip():
        return None
    if len(text) > limit:
        abort(400, description=f"The payload is at most {limit:,} characters: {unchanged}.")
    try:
        value = json.loads(text, parse_constant=refuse_constant, parse_float=finite_float)
    except ValueError as error:
        abort(400, description=f"The payload is not valid JSON ({error}): {unchanged}.")
    except RecursionError:
        abort(400, description=f"The payload must not nest more than {MAX_DEPTH} levels deep: {unchanged}.")
    problem = json_problem(value)
    if problem is not None:
        abort(400, description=f"The payload {problem}: {unchanged}.")
    return value
