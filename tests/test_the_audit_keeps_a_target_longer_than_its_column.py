"""The audit entry's ``target`` is a column of 500 characters, but what a command acts on can
be longer: ``stepwise forget KEY`` takes any key, and "achievement:" + a key of 489
characters or more does not fit (PostgreSQL refuses the INSERT: the command failed, and its
audit was lost). The entry keeps the target cut to the column with an ellipsis, for the
list, and the whole of it in its data; a target that fits is kept as it is. The other
commands' targets fit by construction: an action, invocation or user is named by an id or a
name the database holds (users' names are at most 80 characters), a schedule command checks
its name (at most 200 characters) or finds the schedule before it audits, and a bulk
command's target is "filter", its filter (a lane key of up to 255 characters, say) in data.

Not a spec case: the audit is ours.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from engine import audit, commands, history, schedules
from engine.models import Achievement, AuditEntry
from tests.domain import Car


def audited(session: Session) -> list[AuditEntry]:
    session.expire_all()
    return list(session.scalars(select(AuditEntry).order_by(AuditEntry.id)))


def test_forgetting_a_key_too_long_for_the_target_column_is_audited_whole(session: Session) -> None:
    key = "Car/1/visit/" + "x" * 600

    # When an operator forgets a key longer than the column (none is stored under it)
    result = commands.forget(key, by="gina", reason="clean up")

    # Then the command answers, and its one audit entry is kept
    assert not result and result.reason == "not_found"
    (entry,) = audited(session)
    # with the target cut to the column, marked by an ellipsis
    assert len(entry.target) == audit.TARGET_LENGTH
    assert entry.target == f"achievement:{key}"[: audit.TARGET_LENGTH - 1] + "…"
    # and the whole of it in the entry's data, as the entry's full target says
    assert entry.data["target"] == f"achievement:{key}"
    assert entry.full_target == f"achievement:{key}"
    assert (entry.command, entry.by, entry.reason) == ("forget", "gina", "clean up")
    assert entry.result == "not_found"


@pytest.mark.parametrize("length", [488, 489, 500])
def test_the_longest_keys_the_studio_accepts_are_audited(session: Session, length: int) -> None:
    # The achievements page accepts keys of up to 500 characters: 488 is the longest whose
    # target fits, 489 the shortest that does not.
    key = "k" * length

    commands.forget(key, by="gina")

    (entry,) = audited(session)
    assert entry.full_target == f"achievement:{key}"
    assert len(entry.target) <= audit.TARGET_LENGTH
    assert ("target" in entry.data) is (length > 488)


def test_a_target_that_fits_is_kept_as_it_is(session: Session, car: Car) -> None:
    engine.define(Car, "visit", Car.change_location, checksum=lambda car, loc: loc)
    engine.now(car, "visit", "Paris")
    key = session.scalars(select(Achievement.checksum_key)).one()
    exactly = "schedule:" + "n" * (audit.TARGET_LENGTH - len("schedule:"))

    assert commands.forget(key, by="gina")
    audit.record(session, "schedule_sync", exactly, cause=history.CALLER, by=None, result="done")
    session.commit()

    forgot, synced = audited(session)
    target = f"achievement:{key}"
    assert (forgot.target, forgot.full_target, forgot.data) == (target, target, {})
    assert (synced.target, synced.full_target, synced.data) == (exactly, exactly, {})


def test_schedule_commands_refuse_a_name_too_long_before_they_audit(session: Session, car: Car) -> None:
    name = "n" * 600

    with pytest.raises(schedules.ScheduleError, match="at most 200"):
        schedules.create(name, actor_type="Car", actor_id=str(car.id), action="honk", every=60.0, by="olga")
    for command in (schedules.pause, schedules.resume, schedules.trigger, schedules.delete):
        with pytest.raises(schedules.NoSuchSchedule):
            command(name, by="olga")

    assert audited(session) == []


def test_a_bulk_command_on_the_longest_lane_key_keeps_it_in_its_data(session: Session) -> None:
    lane = "Car/" + "k" * 251  # a lane key as long as the column holds: 255 characters

    entry = commands.bulk("cancel", commands.ActionFilter(concurrency_key=lane), by="olga")

    (kept,) = audited(session)
    assert kept.id == entry.id and (kept.target, kept.full_target) == ("filter", "filter")
    assert kept.data["filter"]["concurrency_key"] == lane
    assert (kept.total, kept.result) == (0, "done")
