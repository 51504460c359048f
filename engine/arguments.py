"""Action arguments, stored as JSON.

Actor rows and service objects are stored as references and loaded again by the worker;
datetimes, dates and timedeltas keep their type. Anything else must already be JSON.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy.orm import Session

from . import registry
from .errors import ArgumentError, NotAnActor

TAG = "__stepwise__"


def dump(values: Any) -> Any:
    """The JSON form of ``values`` (a list of arguments, or one value)."""
    if values is None or isinstance(values, (bool, int, float, str)):
        return values
    if isinstance(values, (list, tuple)):
        return [dump(v) for v in values]
    if isinstance(values, dict):
        if TAG in values:
            raise ArgumentError(f"argument dicts may not use the reserved key {TAG!r}")
        for key in values:
            if not isinstance(key, str):
                raise ArgumentError(f"argument dict keys must be strings, got {key!r}")
        return {k: dump(v) for k, v in values.items()}
    if isinstance(values, datetime):
        return {TAG: "datetime", "value": values.isoformat()}
    if isinstance(values, date):
        return {TAG: "date", "value": values.isoformat()}
    if isinstance(values, timedelta):
        return {TAG: "timedelta", "value": values.total_seconds()}
    if isinstance(values, Decimal):
        return {TAG: "decimal", "value": str(values)}
    try:
        actor_type, actor_id = registry.actor_ref(values)
    except NotAnActor:
        raise ArgumentError(
            f"cannot store {values!r} ({type(values).__name__}) as an action argument: use "
            f"JSON values, datetimes, dates, timedeltas, decimals or actors"
        ) from None
    return {TAG: "actor", "type": actor_type, "id": actor_id}


def load(session: Session, values: Any) -> Any:
    """The Python form of JSON ``values`` written by ``dump``; actors are loaded in ``session``."""
    if isinstance(values, list):
        return [load(session, v) for v in values]
    if isinstance(values, dict):
        kind = values.get(TAG)
        if kind is None:
            return {k: load(session, v) for k, v in values.items()}
        if kind == "datetime":
            return datetime.fromisoformat(values["value"])
        if kind == "date":
            return date.fromisoformat(values["value"])
        if kind == "timedelta":
            return timedelta(seconds=values["value"])
        if kind == "decimal":
            return Decimal(values["value"])
        if kind == "actor":
            return registry.load_actor(session, values["type"], values["id"])
        raise ArgumentError(f"unknown stored argument kind {kind!r}")
    return values
