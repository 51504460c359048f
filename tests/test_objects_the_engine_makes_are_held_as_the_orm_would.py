"""Objects the engine writes itself, without the ORM's attribute events (engine/rows.py):
columns its own statements wrote are marked as loaded in one call (``set_committed``), as
SQLAlchemy's ``set_committed_value`` marks each; a candidate action or a child's
invocation is made with its values in its ``__dict__`` (``transient``), and a flush
inserts it as it would its constructor's."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import inspect as sa_inspect
from sqlalchemy import select
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

import engine
from engine import rows
from engine.models import Invocation
from tests.domain import Car


def test_values_set_as_committed_together_are_what_setting_each_leaves(session: Session, car: Car) -> None:
    """``rows.set_committed`` marks what the engine's own statements wrote: the object
    ends as SQLAlchemy's ``set_committed_value`` for each key leaves it, a pending change
    of one of those keys cleared, one of another key kept."""
    engine.later(car, "drive", 5)
    session.commit()
    one, other = session.scalars(select(Invocation)).one(), Invocation()
    for invocation in (one, other):
        invocation.name, invocation.outcome = "pending name", "pending outcome"
    values = {"outcome": "admitted", "settled_at": datetime(2026, 12, 7), "action_id": 9}

    rows.set_committed(one, values)
    for key, value in values.items():
        set_committed_value(other, key, value)

    for invocation in (one, other):
        state = sa_inspect(invocation)
        assert {key: getattr(invocation, key) for key in values} == values
        assert not any(state.attrs[key].history.has_changes() for key in values)
        assert state.attrs.name.history.added == ["pending name"]


def test_an_object_made_with_no_attribute_events_is_inserted_as_its_constructors(session: Session) -> None:
    """``rows.transient`` (an admission's candidate action, a child's invocation) makes
    the object its constructor would: added and flushed, its row is the same, defaults
    included, and a value set afterwards is saved with it."""
    values = {"actor_type": "Car", "actor_id": "1", "name": "drive", "arguments_json": [3]}
    made, constructed = rows.transient(Invocation, values), Invocation(**values)
    made.name = constructed.name = "park"
    session.add_all([made, constructed])
    session.commit()
    session.expire_all()

    def stored(invocation: Invocation) -> dict[str, Any]:
        found = session.get(Invocation, invocation.id)
        keys = [prop.key for prop in sa_inspect(Invocation).column_attrs]
        return {key: getattr(found, key) for key in keys if key not in ("id", "created_at")}

    assert stored(made) == stored(constructed)
    assert stored(made)["name"] == "park"
    assert (stored(made)["kind"], stored(made)["resend_count"]) == ("action", 0)  # the columns' defaults
    assert session.get(Invocation, made.id).created_at is not None
