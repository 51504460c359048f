"""Set-based writes (engine/recordset.py): on PostgreSQL a batch of rows is one INSERT from
one JSON parameter, whose text is the same whatever the number of rows; NULLs, JSON and the order of
the rows arrive as given. The history and the counters are written this way."""

from __future__ import annotations

from datetime import datetime

import pytest
from sqlalchemy import event, quoted_name, select
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


def test_values_beyond_what_a_fast_encoder_takes_arrive_as_given(backend: Engine) -> None:
    # recordset.dumps encodes with orjson; what it refuses (an integer beyond 64 bits) is
    # encoded by json, as before, rather than failing the batch. A key that is not a string
    # is written as json writes it.
    cases = [{"big": 2**70, "list": [2**64, -(2**65)]}, {1: "one", "text": "é ✓ \u2028"}]
    with db.transaction() as session:
        recordset.insert(session.connection(), EVENTS, [{**rows(1)[0], "data": data} for data in cases])
    with db.session() as session:
        stored = session.scalars(select(EVENTS.c.data).order_by(EVENTS.c.id)).all()
    assert stored[-2:] == [cases[0], {"1": "one", "text": "é ✓ \u2028"}]


def test_rows_keyed_by_a_tables_column_names_take_the_fast_encoder(
    backend: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The engine keys its batch rows by column.name, for a column named apart from its
    # attribute (the actions' "arguments") a str subclass, quoted_name, that orjson
    # refuses as a key without OPT_NON_STR_KEYS: every founding and spawning batch then paid
    # json's ~20x slower encoder (py-spy: json's encoder at 1.5% of the workers' Python).
    def slow(*_args: object, **_kwargs: object) -> str:
        raise AssertionError("encoded by json, not orjson")

    monkeypatch.setattr(recordset.json, "dumps", slow)
    keyed = [{quoted_name(key, None): value for key, value in row.items()} for row in rows(3)]
    with db.transaction() as session:
        recordset.insert(session.connection(), EVENTS, keyed)
    with db.session() as session:
        stored = session.execute(select(EVENTS).order_by(EVENTS.c.id)).mappings().all()
    assert [{key: row[key] for key in rows(1)[0]} for row in stored[-3:]] == rows(3)


def test_times_travel_as_postgresql_reads_them(backend: Engine) -> None:
    at = [datetime(2026, 12, 1, 12), datetime(2026, 12, 1, 12, 0, 0, 7), datetime(1999, 1, 2, 3, 4, 5, 9)]
    with db.transaction() as session:
        recordset.insert(session.connection(), EVENTS, [{**rows(1)[0], "at": each} for each in at])
    with db.session() as session:
        stored = session.scalars(select(EVENTS.c.at).order_by(EVENTS.c.id)).all()
    assert stored[-3:] == at
