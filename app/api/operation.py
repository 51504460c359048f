"""The parts of the OpenAPI document each operation is described with: a reference to a
model's schema, JSON content, an error answer, and ``Operation`` (what the document says
of one route beyond its models). ``app/api/openapi.py`` assembles the document."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from . import parameters
from . import schemas as api

REF = "#/components/schemas/{model}"


def ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def json_content(schema: dict[str, Any], example: Any = None) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": schema}
    if example is not None:
        media["example"] = example
    return {"application/json": media}


def error_response(description: str) -> dict[str, Any]:
    return {"description": description, "content": json_content(ref(api.Error))}


@dataclass(frozen=True)
class Operation:
    """What the document says of one route beyond its models."""

    path: str
    method: str
    operation_id: str
    summary: str
    tag: str
    answer: dict[str, Any]
    query: type[parameters.Query] | None = None
    refusals: dict[str, str] = field(default_factory=dict)
    path_parameters: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    #: The success's status code.
    status: str = "200"


BAD_PARAMETER = "A query parameter is unknown or malformed (bad_parameter: `parameter` names it)"
