"""The JSON API's query parameters, as pydantic models: each list's filters and paging
(``ActionQuery``, ``LaneQuery``) validate the query string, and a route that takes none
refuses any (``NoQuery``). ``app/api/openapi.py`` documents them from these models.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from .. import schemas
from ..schemas import MAX_ID
from .schemas import ActionStatus

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
PAGING = ("before", "limit")


def _text(value: Any) -> Any:
    """A query parameter's text, stripped; empty is the same as not given."""
    if not isinstance(value, str):
        return value
    value = value.strip()
    if "\x00" in value:
        raise PydanticCustomError("invalid", "must not contain NUL characters")
    return value or None


def _time(value: Any) -> Any:
    """An ISO 8601 time; one without an offset is UTC, like every time the API shows."""
    value = _text(value)
    if not isinstance(value, str):
        return value
    try:
        parsed = datetime.fromisoformat(value)
        return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo is not None else parsed
    except (ValueError, OverflowError):
        raise PydanticCustomError(
            "invalid",
            "must be an ISO 8601 time such as 2025-01-31T12:00:00Z, not {shown}",
            {"shown": repr(value[:40])},
        ) from None


def _limit(value: Any) -> Any:
    value = _text(value)
    return DEFAULT_LIMIT if value is None else value


QueryText = Annotated[str | None, BeforeValidator(_text)]
QueryTime = Annotated[datetime | None, BeforeValidator(_time)]


class Query(BaseModel):
    """Query parameters: each one text, stripped, empty as if not given; an unknown one is
    refused (so a misspelt filter never silently matches everything). This one has none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def names(cls) -> list[str]:
        """The parameters, each list's own filters first, then the paging ones."""
        return [k for k in cls.model_fields if k not in PAGING] + [k for k in PAGING if k in cls.model_fields]

    @classmethod
    def parse(cls, arguments: dict[str, str]) -> Any:
        """The query, or ``BadParameter`` naming the first parameter at fault."""
        try:
            return cls.model_validate(arguments)
        except ValidationError as failure:
            names = cls.names()
            allowed = f"use {', '.join(names)}" if names else "this one takes none"
            found = schemas.problems(
                failure,
                cls,
                missing=lambda field: "is required",
                unknown=lambda field: f"is not a parameter here: {allowed}",
                word=schemas.parameter_message,
            )
            name, problem = next(iter(found.items()))
            raise BadParameter(name, problem) from None


class BadParameter(Exception):
    """Raised when a query parameter is unknown or malformed; the message names it."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"{name} {problem}")
        self.name = name


class Paged(Query):
    """A list's parameters: its filters, then the keyset page's."""

    before: Annotated[int | None, BeforeValidator(_text)] = Field(
        None, ge=1, le=MAX_ID, description="Keyset cursor: only ids below this one (the `next` link sets it)"
    )
    limit: Annotated[int, BeforeValidator(_limit)] = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)


class ActionQuery(Paged):
    status: Annotated[ActionStatus | None, BeforeValidator(_text)] = Field(
        None, description="Only this status"
    )
    name: QueryText = Field(None, description="Only actions of this name")
    actor_type: QueryText = Field(None, description="Only actions of actors of this type")
    actor_id: QueryText = Field(None, description="Only actions of this actor (with actor_type)")
    concurrency_key: QueryText = Field(None, description="Only actions in this lane")
    roots_only: Annotated[bool | None, BeforeValidator(_text)] = Field(
        None, description="Only roots (actions invoked without a parent step)"
    )
    created_after: QueryTime = Field(None, description="Created at or after (ISO 8601)")
    created_before: QueryTime = Field(None, description="Created before (ISO 8601)")
    search: QueryText = Field(None, description="Text searched for in the arguments")


class LaneQuery(Paged):
    concurrency_key: QueryText = Field(None, description="Only this lane")
    outbound: Annotated[bool | None, BeforeValidator(_text)] = Field(
        None, description="true: only lanes waiting for an outbound completion; false: only the others"
    )


NoQuery = Query
