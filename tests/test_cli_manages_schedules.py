"""Given the ``stepwise schedules`` commands, an operator creates, lists, pauses, resumes,
triggers and deletes schedules from the command line, each change audited with who ran
it; bad input exits 1 naming the option and changes nothing. ``stepwise clock`` syncs the
schedules declared in code and fires the due ones (and sweeps).

The commands run in this process (``engine.cli.main``) on the test's stub broker."""

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
from tests.schedule_helpers import MONDAY, actions_started, schedule_row, ticks

Stepwise = Callable[..., int]


@pytest.fixture
def stepwise(backend: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stepwise]:
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")  # required by the clock, never dialled
    monkeypatch.setenv("STEPWISE_OPERATOR", "zoe")
    engine.define(Car, "honk", lambda car: car.honk())
    schedules.forget_declared()

    def run(*args: str) -> int:
        try:
            return cli.main([*args, "--database-url", backend.url.render_as_string(hide_password=False)])
        finally:
            engine.configure(backend)

    yield run
    schedules.forget_declared()


def test_create_list_pause_resume_trigger_and_delete(
    car: Car, stepwise: Stepwise, capsys: pytest.CaptureFixture[str]
) -> None:
    testing.freeze(MONDAY)
    created = stepwise(
        "schedules", "create", "honker", "--cron", "0 9 * * 1-5", "--timezone", "Europe/Paris",
        "--actor-type", "Car", "--actor-id", str(car.id), "--action", "honk", "--overlap", "allow",
    )  # fmt: skip
    assert created == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "Created schedule honker: At 09:00 on Monday through Friday (Europe/Paris)" in out
    assert "next tick 2026-01-06 08:00:00 UTC" in out

    assert stepwise("schedules", "list") == 0
    listing = capsys.readouterr().out
    assert "honker  [active, operator]" in listing
    assert "next (UTC): 2026-01-06 08:00:00, 2026-01-07 08:00:00, 2026-01-08 08:00:00" in listing
    assert "never ran" in listing

    assert stepwise("schedules", "pause", "honker", "--reason", "holidays") == 0
    assert stepwise("schedules", "pause", "honker") == 1
    assert "changed nothing: it is paused already" in capsys.readouterr().err
    assert stepwise("schedules", "list") == 0
    assert "[paused by zoe, operator]" in capsys.readouterr().out
    assert stepwise("schedules", "resume", "honker") == 0

    assert stepwise("schedules", "trigger", "honker", "--by", "amy") == 0
    assert "Triggered honker (invocation" in capsys.readouterr().out
    testing.drain()
    assert [a.status for a in actions_started()] == ["succeeded"]
    assert stepwise("schedules", "list") == 0
    assert f"last: fired 2026-01-05 08:59:30 (action {actions_started()[0].id})" in capsys.readouterr().out

    assert stepwise("schedules", "delete", "honker") == 0
    with engine.new_session() as s:
        trail = s.execute(select(AuditEntry.command, AuditEntry.by).order_by(AuditEntry.id)).all()
    assert [tuple(row) for row in trail] == [
        ("schedule_create", "zoe"),
        ("schedule_pause", "zoe"),
        ("schedule_pause", "zoe"),
        ("schedule_resume", "zoe"),
        ("schedule_trigger", "amy"),
        ("schedule_delete", "zoe"),
    ]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--cron", "0 25 * * *"], "is not a cron expression"),
        (["--cron", "0 2 * * *", "--timezone", "Mars/Base"], "unknown time zone 'Mars/Base'"),
        (["--cron", "0 2 * * *", "--actor-type", "Boat"], "no actor type 'Boat'"),
        (["--cron", "0 2 * * *", "--action", "fly"], "Car has no registered action 'fly'"),
        (["--cron", "0 2 * * *", "--actor-id", "999"], "there is no Car with id '999'"),
        (["--cron", "0 2 * * *", "--args", "{"], "--args is not valid JSON"),
    ],
)
def test_bad_input_exits_1_naming_the_field(
    car: Car, stepwise: Stepwise, capsys: pytest.CaptureFixture[str], options: list[str], says: str
) -> None:
    given = {"--actor-type": "Car", "--actor-id": str(car.id), "--action": "honk"}
    for flag, value in zip(options[::2], options[1::2], strict=True):
        given[flag] = value
    argv = [part for pair in given.items() for part in pair]
    assert stepwise("schedules", "create", "bad", *argv) == 1
    err = capsys.readouterr().err
    assert says in err and "nothing was changed" in err
    with engine.new_session() as s:
        assert s.scalars(select(schedules.Schedule)).all() == []


def test_unknown_names_exit_1(stepwise: Stepwise, capsys: pytest.CaptureFixture[str]) -> None:
    assert stepwise("schedules", "trigger", "nope") == 1
    assert "there is no schedule named 'nope'" in capsys.readouterr().err


def test_the_clock_syncs_declared_schedules_and_fires_the_due_ones(
    car: Car, stepwise: Stepwise, capsys: pytest.CaptureFixture[str]
) -> None:
    testing.freeze(MONDAY)
    engine.schedule("declared", every=30, actor=car, action="honk")

    assert stepwise("clock") == 0  # one round: sync, tick, sweep
    assert "1 created" in capsys.readouterr().out
    assert schedule_row("declared").next_fire_at == MONDAY + timedelta(seconds=30)

    testing.travel(timedelta(seconds=30))
    assert stepwise("clock") == 0
    assert "schedules: 1 fired" in capsys.readouterr().out
    assert [t.outcome for t in ticks("declared")] == ["fired"]


def test_the_clock_needs_a_broker(
    stepwise: Stepwise, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("REDIS_URL")
    assert stepwise("clock") == 1
    assert "stepwise clock needs the broker" in capsys.readouterr().err
