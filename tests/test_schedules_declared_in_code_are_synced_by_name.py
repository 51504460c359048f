"""Given schedules declared in code (``engine.schedule(...)``), when ``engine.schedules.sync()``
runs (the clock runs it at start), then each is upserted by name: created once, updated
when the code changes it (its next tick recomputed when its timing changed), and an
operator's pause is kept. A service actor or an (actor type, id) pair can be the actor;
a bad declaration fails at import time naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select

import engine
from engine import schedules, testing
from engine.models import Action, AuditEntry
from tests.domain import Car
from tests.schedule_helpers import run_clock, schedule_row, ticks

START = datetime(2026, 1, 5, 0, 0, 30)


class Reports:
    """A service actor: no row, registered by name."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def generate(self, kind: str) -> None:
        self.made.append(kind)


@pytest.fixture(autouse=True)
def no_declarations() -> Iterator[None]:
    schedules.forget_declared()
    yield
    schedules.forget_declared()


@pytest.fixture
def reports() -> Reports:
    service = Reports()
    engine.register_service(service, id="main")
    engine.define(Reports, "generate", lambda r, kind: r.generate(kind))
    return service


def test_a_declared_schedule_is_created_once_and_fires(reports: Reports) -> None:
    testing.freeze(START)
    engine.schedule(
        "nightly-report",
        cron="0 2 * * *",
        timezone="Europe/Paris",
        actor=reports,
        action="generate",
        args=["daily"],
        missed="run_once",
        overlap="skip",
    )
    assert schedules.sync().created == ["nightly-report"]
    assert schedules.sync().unchanged == ["nightly-report"]

    row = schedule_row("nightly-report")
    assert (row.source, row.actor_type, row.actor_id, row.arguments) == ("code", "Reports", "main", ["daily"])
    assert row.next_fire_at == datetime(2026, 1, 5, 1, 0)  # 02:00 in Paris, in winter

    testing.travel(timedelta(hours=1))
    assert run_clock().fired == 1
    assert reports.made == ["daily"]
    with engine.new_session() as s:
        assert s.scalars(select(Action.status).where(Action.name == "generate")).all() == ["succeeded"]
        assert s.scalars(select(AuditEntry.command)).all() == ["schedule_sync"]


def test_a_changed_declaration_updates_the_row_and_keeps_its_pause(reports: Reports) -> None:
    testing.freeze(START)
    engine.schedule("sync", every=60, actor=reports, action="generate", args=["a"])
    schedules.sync()
    schedules.pause("sync", by="olga")

    # When the code changes its interval and arguments, and syncs again
    engine.schedule("sync", every=300, actor=reports, action="generate", args=["b"])
    report = schedules.sync()

    assert report.updated == ["sync"]
    row = schedule_row("sync")
    assert (row.every_seconds, row.arguments, row.paused) == (300, ["b"], True)
    assert row.next_fire_at == datetime(2026, 1, 5, 0, 5)


def test_an_actor_type_and_id_pair_is_an_actor(car: Car) -> None:
    testing.freeze(START)
    engine.define(Car, "honk", lambda car: car.honk())
    engine.schedule("honks", every=10, actor=("Car", car.id), action="honk")
    schedules.sync()
    testing.travel(timedelta(seconds=10))
    assert run_clock().fired == 1
    assert ticks("honks")[0].outcome == "fired"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"cron": "not cron"}, "cron"),
        ({"cron": "0 2 * * *", "timezone": "Paris"}, "timezone"),
        ({"every": 60, "missed": "sometimes"}, "missed"),
        ({"every": 60, "overlap": "queue"}, "overlap"),
        ({"every": 60, "action": "fly"}, "action"),
        ({"every": 60, "actor": object()}, "actor"),
        ({"every": 60, "args": [object()]}, "arguments"),
    ],
)
def test_a_bad_declaration_fails_at_once_naming_the_field(
    reports: Reports, options: dict[str, object], field: str
) -> None:
    given: dict[str, object] = {"actor": reports, "action": "generate", **options}
    with pytest.raises(schedules.ScheduleError) as raised:
        engine.schedule("bad", **given)  # type: ignore[arg-type]
    assert raised.value.field == field
    assert schedules.declared() == []


def test_two_clocks_starting_together_sync_the_same_declarations(reports: Reports) -> None:
    import threading

    engine.schedule("sync", every=60, actor=reports, action="generate", args=["a"])
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def start_clock() -> None:
        try:
            barrier.wait()
            schedules.sync()
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=start_clock) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    with engine.new_session() as s:
        assert s.scalars(select(schedules.Schedule.name)).all() == ["sync"]
