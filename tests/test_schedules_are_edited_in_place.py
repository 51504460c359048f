"""Given a schedule, when an operator edits it (its rule, cron or interval, its time zone, its
arguments, its missed-tick or overlap policy), then it changes in place, keeps its ticks and
its name, and a new rule ticks from the time of the edit: a tick of the old rule or of the
new one that was due before the edit never runs (no back-fire). The edit is audited with the
fields before and after; bad input names the field and changes nothing; a schedule declared
in code is refused, since the code is where it changes (the next sync would undo the edit).
``stepwise schedules edit`` does the same from the command line.

Not a spec case: issue 11, "Schedules"."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine

import engine
from engine import cli, schedules, testing
from engine.models import AuditEntry
from tests.domain import Car
from tests.schedule_helpers import MONDAY, actions_started, honking, run_clock, schedule_row, ticks

NINE = MONDAY.replace(hour=9, minute=0, second=0)


def edits() -> list[AuditEntry]:
    with engine.new_session() as s:
        return list(
            s.scalars(select(AuditEntry).where(AuditEntry.command == "schedule_edit").order_by(AuditEntry.id))
        )


def test_a_new_cron_rule_ticks_from_the_edit_and_never_back_fires(car: Car) -> None:
    # Given a schedule every minute, whose clock has been down for ten minutes
    testing.freeze(MONDAY)
    honking(car)
    testing.travel(timedelta(minutes=10))  # 09:09:30: 09:00..09:09 are due

    # When it is edited to "every 15th minute" in Europe/Paris
    edited = schedules.edit(
        "honker", cron="*/15 * * * *", timezone="Europe/Paris", by="olga", reason="less noise"
    )

    # Then it next ticks at 09:15 UTC, and none of the overdue ticks runs
    assert edited.changed and set(edited.changes) == {"cron", "timezone"}
    row = schedule_row()
    assert (row.cron, row.every_seconds, row.timezone) == ("*/15 * * * *", None, "Europe/Paris")
    assert row.next_fire_at == NINE + timedelta(minutes=15)
    assert run_clock().fired == 0 and ticks() == []
    testing.travel(timedelta(minutes=6))  # 09:15:30
    assert run_clock().fired == 1
    assert [t.due_at for t in ticks()] == [NINE + timedelta(minutes=15)]
    # And the audit keeps who, why, and the fields before and after
    [entry] = edits()
    assert (entry.by, entry.reason, entry.result, entry.target) == (
        "olga",
        "less noise",
        "edited",
        "schedule:honker",
    )
    assert entry.data["before"] == {"cron": "* * * * *", "timezone": "UTC"}
    assert entry.data["after"] == {"cron": "*/15 * * * *", "timezone": "Europe/Paris"}
    assert entry.data["next_fire_at"] == "2026-01-05T09:15:00"


def test_an_interval_replaces_a_cron_rule_and_a_cron_rule_an_interval(car: Car) -> None:
    testing.freeze(MONDAY)
    honking(car)

    schedules.edit("honker", every=timedelta(hours=1), by="olga")
    row = schedule_row()
    assert (row.cron, row.every_seconds, row.next_fire_at) == (None, 3600, NINE)

    schedules.edit("honker", cron="0 2 * * *", by="olga")
    row = schedule_row()
    assert (row.cron, row.every_seconds) == ("0 2 * * *", None)
    assert row.next_fire_at == MONDAY.replace(day=6, hour=2, minute=0, second=0)


def test_arguments_and_policies_change_and_the_next_tick_stays(car: Car) -> None:
    testing.freeze(MONDAY)
    honking(car)
    before = schedule_row().next_fire_at

    edited = schedules.edit("honker", args=["twice"], missed="run_once", overlap="allow", by="olga")

    row = schedule_row()
    assert (row.arguments, row.missed, row.overlap) == (["twice"], "run_once", "allow")
    assert row.next_fire_at == before
    assert edited.changes == {
        "arguments": ([], ["twice"]),
        "missed": ("skip", "run_once"),
        "overlap": ("skip", "allow"),
    }


def test_an_edit_that_changes_nothing_says_so(car: Car) -> None:
    testing.freeze(MONDAY)
    honking(car)

    edited = schedules.edit("honker", cron="* * * * *", missed="skip", by="olga")

    assert not edited.changed
    assert [(e.result, e.data) for e in edits()] == [("unchanged", {})]


def test_a_paused_schedule_stays_paused_when_edited(car: Car) -> None:
    testing.freeze(MONDAY)
    honking(car)
    schedules.pause("honker", by="olga")

    schedules.edit("honker", every=60, by="olga")

    assert schedule_row().paused
    testing.travel(timedelta(minutes=3))
    assert run_clock().fired == 0


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"cron": "0 25 * * *"}, "cron", "is not a cron expression"),
        ({"cron": "0 2 * * *", "every": 60}, "cron", "not both"),
        ({"cron": None}, "cron", "either a cron expression or an interval"),
        ({"every": 0.5}, "every", "a whole number of seconds"),
        ({"timezone": "Mars/Olympus"}, "timezone", "unknown time zone 'Mars/Olympus'"),
        ({"missed": "later"}, "missed", "use one of skip, run_once"),
        ({"overlap": "sometimes"}, "overlap", "use one of skip, allow"),
        ({"args": [object()]}, "arguments", "cannot store"),
    ],
)
def test_bad_input_names_the_field_and_changes_nothing(
    car: Car, change: dict[str, object], field: str, says: str
) -> None:
    testing.freeze(MONDAY)
    honking(car)
    before = schedule_row()

    with pytest.raises(schedules.ScheduleError, match=says) as refused:
        schedules.edit("honker", by="olga", **change)  # type: ignore[arg-type]

    assert refused.value.field == field
    after = schedule_row()
    assert (after.cron, after.timezone, after.arguments, after.missed, after.next_fire_at) == (
        before.cron,
        before.timezone,
        before.arguments,
        before.missed,
        before.next_fire_at,
    )
    assert edits() == []


def test_an_unknown_schedule_is_refused(car: Car) -> None:
    with pytest.raises(schedules.ScheduleError, match="there is no schedule named 'nope'"):
        schedules.edit("nope", every=60)


def test_a_schedule_declared_in_code_is_changed_in_the_code(car: Car) -> None:
    # Given a schedule declared in code and synced
    testing.freeze(MONDAY)
    schedules.forget_declared()
    engine.define(Car, "honk", lambda car: car.honk())
    engine.schedule("declared", every=300, actor=car, action="honk")
    schedules.sync()
    try:
        # When an operator edits it, then it is refused, saying where it changes
        with pytest.raises(schedules.DeclaredInCode, match=r"declared in code .*change it there"):
            schedules.edit("declared", every=60, by="olga")
        assert schedule_row("declared").every_seconds == 300
        # And the operators' other commands still work on it
        assert schedules.pause("declared", by="olga") is True
    finally:
        schedules.forget_declared()


Stepwise = Callable[..., int]


@pytest.fixture
def stepwise(backend: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stepwise]:
    monkeypatch.setenv("STEPWISE_OPERATOR", "zoe")

    def run(*args: str) -> int:
        try:
            return cli.main([*args, "--database-url", backend.url.render_as_string(hide_password=False)])
        finally:
            engine.configure(backend)

    yield run


def test_the_cli_edits_a_schedule(car: Car, stepwise: Stepwise, capsys: pytest.CaptureFixture[str]) -> None:
    testing.freeze(MONDAY)
    honking(car)

    edited = stepwise(
        "schedules", "edit", "honker", "--cron", "0 9 * * 1-5", "--timezone", "Europe/Paris",
        "--args", '["twice"]', "--overlap", "allow", "--reason", "workdays",
    )  # fmt: skip

    assert edited == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "Edited schedule honker: cron * * * * * -> 0 9 * * 1-5; timezone UTC -> Europe/Paris" in out
    assert 'arguments [] -> ["twice"]' in out and "overlap skip -> allow" in out
    assert "next tick 2026-01-06 08:00:00 UTC" in out
    [entry] = edits()
    assert (entry.by, entry.reason) == ("zoe", "workdays")

    assert stepwise("schedules", "edit", "honker", "--overlap", "allow") == 1
    assert "changed nothing" in capsys.readouterr().err
    assert stepwise("schedules", "edit", "honker", "--cron", "0 25 * * *") == 1
    err = capsys.readouterr().err
    assert "is not a cron expression" in err and "(--cron)" in err and "nothing was changed" in err
    assert stepwise("schedules", "edit", "honker", "--args", "{}") == 1
    assert "--args must be a JSON array" in capsys.readouterr().err
    assert stepwise("schedules", "edit", "nope", "--every", "60") == 1
    assert "there is no schedule named 'nope'" in capsys.readouterr().err
    assert actions_started() == []


@pytest.mark.postgresql_only  # SQLite: the clock takes the write lock before it reads the row
def test_a_clock_that_saw_the_old_rule_due_does_not_fire_it_after_the_edit(
    car: Car, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an overdue schedule (run_once: a catch-up run is due), and a clock that has read
    # the due schedules when an operator's edit commits, before it locks the row
    from engine.schedules import firing

    testing.freeze(MONDAY)
    honking(car, missed="run_once")
    testing.travel(timedelta(minutes=10))
    fire_due = firing._fire_due

    def edited_first(s: object, schedule_id: int) -> str | None:
        schedules.edit("honker", cron="0 2 * * *", by="olga")
        return fire_due(s, schedule_id)  # type: ignore[arg-type]

    monkeypatch.setattr(firing, "_fire_due", edited_first)

    # When the clock goes on, then it finds nothing due under the row's lock: no back-fire
    assert run_clock().fired == 0
    assert ticks() == [] and actions_started() == []
    assert schedule_row().next_fire_at == MONDAY.replace(day=6, hour=2, minute=0, second=0)
