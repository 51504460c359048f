"""Set-based writes (engine/recordset.py): on PostgreSQL a batch of rows is one INSERT from
one JSON parameter, whose text is the same whatever the number of rows; NULLs, JSON and the order of
the rows arrive as given. The history and the counters are written this way."""

from __future__ import annotations

from datetime import datetime

import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import Engine

from engine import counter, db, history, recordset
from engine.history import EVENTS

pytestmark = pytest.mark.postgresql_only


def rows(n: int) -> list[dict[str, object]]:
    return [
        {
            "action_id": 10 + i if i % 2 else None,
            "root_id": None,
            "invocation_id": None,
            "step_id": 3_000_000_000 + i,
            "event": f"e{i}",
            "cause": history.WORKER,
            "by": None if i else "olga",
            "at": datetime(2026, 12, 1, 12, 0, 0, 1000 * i),
            "data": {"n": i, "nested": {"list": [1, "two", None]}} if i else {},
        }
        for i in range(n)
    ]


def test_rows_of_every_batch_size_arrive_as_given_in_one_statement_text(backend: Engine) -> None:
    texts: set[str] = set()

    def seen(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if "stepwise_action_events" in statement:
            texts.add(statement)

    event.listen(backend, "before_cursor_execute", seen)
    try:
        for n in (1, 3, 64):
            with db.transaction() as session:
                recordset.insert(session.connection(), EVENTS, rows(n))
    finally:
        event.remove(backend, "before_cursor_execute", seen)
    assert len(texts) == 1

    with db.session() as session:
        stored = session.execute(select(EVENTS).order_by(EVENTS.c.id)).mappings().all()
    assert len(stored) == 1 + 3 + 64
    last = [{key: row[key] for key in rows(1)[0]} for row in stored[-64:]]
    assert last == rows(64)


def test_the_counters_add_up_across_batches(backend: Engine) -> None:
    for _ in range(3):
        with db.transaction() as session:
            counter.count_by(session, counter.COMPLETED, "status", {"succeeded": 40, "failed": 2})
            counter.count(session, {"stepwise_retries_total": 5})
    with db.session() as session:
        totals = counter.totals(session)
    assert sorted(totals[counter.COMPLETED], key=str) == [
        ({"status": "failed"}, 6),
        ({"status": "succeeded"}, 120),
    ]
    assert totals["stepwise_retries_total"] == [({}, 15)]
