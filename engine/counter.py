"""Counters: monotonic totals of what happened, kept in ``stepwise_counters`` for the metrics.

A counter only grows: it is added to in the transaction where the thing it counts happens,
so it survives pruning the history, and a rollback takes its increment back with the rest.
Prometheus' ``rate()`` needs exactly that (a total recomputed from prunable rows drops).

On PostgreSQL a counter is kept in up to ``SHARDS`` rows, one per shard: a transaction adds
to the shard of its server process (``pg_backend_pid()``), and a reading sums the shards.
With one row, its lock was held by every completing batch until it committed, so the
batches of two worker processes took turns (tests/test_counting_in_two_transactions_at_once_
does_not_wait.py). One transaction adds to one shard only, in key order, as before.
"""

from __future__ import annotations

import json
from collections import Counter as Tally
from collections.abc import Iterable, Mapping
from typing import Any, cast

from sqlalchemy import BigInteger, SmallInteger, String, Table, func, select
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Mapped, Session, mapped_column
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ColumnElement

from . import recordset
from .db import Base

#: The counters, with the HELP line of each. ``count`` refuses any other name.
COUNTERS: dict[str, str] = {
    "stepwise_retries_total": "Failed attempts of step bodies that were retried.",
    "stepwise_sweeper_recoveries_total": "Work that was due but not picked up, which the sweeper sent again.",
    "stepwise_signals_sent_total": "Signals recorded in an action's inbox.",
    "stepwise_signals_consumed_total": "Signals consumed by a step that waited for them.",
    "stepwise_compensations_total": "Compensations started (each a child action undoing a completed step).",
    "stepwise_compensations_failed_total": "Compensations that failed, leaving their action for an operator.",
    "stepwise_heartbeat_timeouts_total": "Running attempts lost: no heartbeat for their heartbeat_timeout.",
    "stepwise_attempt_timeouts_total": "Attempts of step bodies that ran longer than their attempt_timeout.",
    "stepwise_schedule_ticks_fired_total": "Schedule ticks that started an action (manual runs included).",
    "stepwise_schedule_ticks_skipped_total": "Schedule ticks that started nothing, by reason: "
    "skipped (the previous run was still going) or missed (no clock ran; missed: skip).",
    # Counted from the "completed" events of each transaction, by their status.
    "stepwise_actions_completed_total": "Actions completed, by the status they were completed with.",
}

#: History events counted as they are written (``count_events``): (event, cause) -> counter;
#: a cause of None counts the event whatever its cause.
EVENT_COUNTERS: dict[tuple[str, str | None], str] = {
    ("attempt_failed", None): "stepwise_retries_total",
    ("recovered", "sweeper"): "stepwise_sweeper_recoveries_total",
    ("signal_received", None): "stepwise_signals_sent_total",
    ("signal_consumed", None): "stepwise_signals_consumed_total",
    ("compensation_started", None): "stepwise_compensations_total",
    ("compensation_failed", None): "stepwise_compensations_failed_total",
}
_EVENTS = {event for event, _ in EVENT_COUNTERS}
COMPLETED = "stepwise_actions_completed_total"


#: How many rows a counter may be spread over on PostgreSQL: a few more than the
#: connections that complete actions at once in a typical deployment.
SHARDS = 16
#: The shard a PostgreSQL session adds to.
SHARD_OF_SESSION = f"mod(pg_backend_pid(), {SHARDS})"  # not %: DDL texts go through psycopg's placeholders


class ShardOfSession(ColumnElement[int]):
    """The default of ``stepwise_counters.shard``: the session's shard on PostgreSQL, 0 on
    SQLite (one writer at a time)."""

    inherit_cache = True
    type = SmallInteger()


@compiles(ShardOfSession)
def _no_shard(element: ShardOfSession, compiler: SQLCompiler, **kw: Any) -> str:
    return "0"


@compiles(ShardOfSession, "postgresql")
def _shard_of_session(element: ShardOfSession, compiler: SQLCompiler, **kw: Any) -> str:
    return SHARD_OF_SESSION


class Counter(Base):
    __tablename__ = "stepwise_counters"

    #: The sample's name, e.g. ``stepwise_retries_total``.
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    #: Its labels as compact JSON with sorted keys (``{"status":"failed"}``), or "" for none.
    labels: Mapped[str] = mapped_column(String(500), primary_key=True, default="")
    value: Mapped[int] = mapped_column(BigInteger, default=0)
    #: Which of the counter's rows this is (``SHARDS``); written by its default only.
    shard: Mapped[int] = mapped_column(SmallInteger, primary_key=True, server_default=ShardOfSession())

    def __repr__(self) -> str:
        return f"<Counter {self.name}{{{self.labels}}} {self.value}>"


COUNTER_TABLE = cast(Table, Counter.__table__)


def count(session: Session, increments: Mapping[str, int], labels: Mapping[str, str] | None = None) -> None:
    """Add ``increments`` (counter name -> how many) to the counters, in the caller's
    transaction: one statement, whatever the number of counters, and none when every
    increment is 0. Call it once per committed batch, not once per action."""
    key = _labels(labels)
    _add(session, [(name, key, n) for name, n in increments.items()])


def count_by(session: Session, name: str, label: str, increments: Mapping[str, int]) -> None:
    """Add to one counter per value of ``label``, in one statement: e.g.
    ``count_by(session, "stepwise_actions_completed_total", "status", {"succeeded": 40,
    "failed": 2})`` once per committed batch."""
    _add(session, [(name, _labels({label: value}), n) for value, n in increments.items()])


def _labels(labels: Mapping[str, str] | None) -> str:
    return json.dumps(dict(labels), sort_keys=True, separators=(",", ":")) if labels else ""


def _add(session: Session, increments: list[tuple[str, str, int]]) -> None:
    """One upsert adding each (name, labels, n)."""
    _write(session, _rows(increments))


def _write(session: Session, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        recordset.insert(connection, COUNTER_TABLE, rows, on_conflict=ADD)  # one text, any rows
        return
    statement = sqlite.insert(COUNTER_TABLE).values(rows)
    statement = statement.on_conflict_do_update(
        index_elements=[COUNTER_TABLE.c.name, COUNTER_TABLE.c.labels, COUNTER_TABLE.c.shard],
        set_={"value": COUNTER_TABLE.c.value + statement.excluded.value},
    )
    connection.execute(statement)


def _rows(increments: list[tuple[str, str, int]]) -> list[dict[str, Any]]:
    """The counter rows to upsert, in key order: on PostgreSQL each counter's row stays
    locked until the commit, and two transactions that lock the same counters in the same
    order cannot deadlock. Increments of 0 write nothing."""
    unknown = sorted({name for name, _, _ in increments} - COUNTERS.keys())
    if unknown:
        raise ValueError(f"unknown counters {unknown}: declare them in engine.counter.COUNTERS")
    return [{"name": name, "labels": key, "value": int(n)} for name, key, n in sorted(increments) if n]


#: An increment of a counter that exists adds to its value.
ADD = "ON CONFLICT (name, labels, shard) DO UPDATE SET value = stepwise_counters.value + excluded.value"


def count_events(session: Session, events: Iterable[Mapping[str, Any]]) -> None:
    """Count the history events about to be written, in one statement: completions by
    status, retries and recoveries (none when the transaction has none of them).
    Completions are counted in the transaction that completes, so a rolled-back batch
    counts nothing. On PostgreSQL ``history.write_pending`` writes ``event_rows`` in the
    statement that inserts the events instead."""
    _write(session, event_rows(events))


def event_rows(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The counter rows that ``events`` add to (see ``count_events``)."""
    tally: Tally[str] = Tally()
    completed: Tally[str] = Tally()
    for entry in events:
        event = entry["event"]
        if event == "completed":
            completed[str((entry.get("data") or {}).get("status"))] += 1
        elif event in _EVENTS:
            name = EVENT_COUNTERS.get((event, None)) or EVENT_COUNTERS.get((event, entry["cause"]))
            if name is not None:
                tally[name] += 1
    increments = [(name, "", n) for name, n in tally.items()]
    increments += [(COMPLETED, _labels({"status": to}), n) for to, n in completed.items()]
    return _rows(increments)


def totals(session: Session) -> dict[str, list[tuple[dict[str, str], int]]]:
    """Every counter's values, by name: (labels, value) for each label set, its shards
    summed."""
    found: dict[str, list[tuple[dict[str, str], int]]] = {}
    key = (Counter.name, Counter.labels)
    rows = select(*key, func.sum(Counter.value)).group_by(*key).order_by(*key)
    for name, labels, value in session.execute(rows):
        found.setdefault(name, []).append((json.loads(labels) if labels else {}, int(value)))
    return found
