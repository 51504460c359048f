"""What every blueprint of the JSON API shares (``views``: actions, trees, lanes;
``schedule_views``: schedules and their commands): errors answered as JSON, the query
string validated by a model of ``app.api.parameters``, times in UTC, and the CSRF token a
signed-in session's commands need, carried by every answer."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar, cast

from flask import Blueprint, g, jsonify, request
from werkzeug.wrappers import Response

from ..security import csrf
from . import parameters


class ApiError(Exception):
    def __init__(self, code: int, error: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code, self.error, self.message, self.extra = code, error, message, extra


def api_error(error: ApiError) -> Response:
    response = jsonify({"error": error.error, "message": error.message, **error.extra})
    response.status_code = error.code
    return response


def bad_parameter(error: parameters.BadParameter) -> Response:
    return api_error(ApiError(400, "bad_parameter", str(error), parameter=error.name))


def csrf_header(response: Response) -> Response:
    """A signed-in session's CSRF token, which the API's commands need in X-CSRF-Token."""
    if g.get("user") is not None:
        response.headers[csrf.HEADER] = csrf.token()
    return response


def install(bp: Blueprint) -> None:
    """Answer ``bp``'s errors as JSON, and give its answers the CSRF header."""
    bp.register_error_handler(ApiError, api_error)
    bp.register_error_handler(parameters.BadParameter, bad_parameter)
    bp.after_request(csrf_header)


Q = TypeVar("Q", bound=parameters.Query)


def query(model: type[Q]) -> Q:
    """The query string, validated by ``model`` (``BadParameter``, a 400, names the first
    parameter at fault)."""
    return cast(Q, model.parse(request.args.to_dict()))


def iso(value: datetime | None) -> str | None:
    """Times are naive UTC in the database; the API says so with a Z."""
    return value.isoformat() + "Z" if value is not None else None
