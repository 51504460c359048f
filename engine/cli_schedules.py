"""``stepwise schedules …`` (operators' commands on schedules, audited) and ``stepwise
clock`` (the clock process: fires due schedules and sweeps).

    stepwise schedules list
    stepwise schedules create NAME (--cron EXPR | --every SECONDS) --actor-type T --actor-id ID
                              --action NAME [--args JSON] [--timezone ZONE] [--missed skip|run_once]
                              [--overlap skip|allow]
    stepwise schedules edit NAME [--cron EXPR | --every SECONDS] [--timezone ZONE] [--args JSON]
                            [--missed skip|run_once] [--overlap skip|allow]
    stepwise schedules pause NAME | resume NAME | trigger NAME | delete NAME
    stepwise clock [--every SECONDS] [--poll SECONDS] [--import MODULE]
"""

from __future__ import annotations

import getpass
import importlib
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import click
from sqlalchemy import exc as sa_exc
from sqlalchemy import select

from . import broker, clock, db, schedules, sweeper
from .cli_base import DATABASE_URL, CommandFailed, cli, database, group
from .invocation import Invocation
from .schedules import retention
from .schedules.tables import MISSED_POLICIES, OVERLAP_POLICIES, SKIP

schedules_group = group("schedules", "schedules: cron or interval rules that start actions")

BY = click.option(
    "--by", metavar="NAME", help="who runs the command (default: $STEPWISE_OPERATOR, else your login)"
)
REASON = click.option("--reason", metavar="TEXT", help="why, for the audit")
IMPORTS = click.option(
    "--import",
    "imports",
    multiple=True,
    metavar="MODULE",
    help="a module defining your actors or declaring schedules (repeatable; also $STEPWISE_IMPORTS)",
)
NAME = click.argument("name", metavar="NAME")


def operator(by: str | None) -> str:
    return str(by or os.environ.get("STEPWISE_OPERATOR") or getpass.getuser())


def import_modules(imports: tuple[str, ...]) -> None:
    extra = [m for m in os.environ.get("STEPWISE_IMPORTS", "").split(",") if m.strip()]
    for module in [*extra, *imports]:
        importlib.import_module(module.strip())


@contextmanager
def connected(database_url: str | None, imports: tuple[str, ...] = ()) -> Iterator[None]:
    broker.setup()
    import_modules(imports)
    with database(database_url, must_exist=True) as sa_engine:
        db.configure(sa_engine)
        yield


@contextmanager
def refused() -> Iterator[None]:
    try:
        yield
    except schedules.ScheduleError as error:
        raise CommandFailed(f"{error} (--{error.field.replace('_', '-')}); nothing was changed") from error


@schedules_group.command("list")
@DATABASE_URL
def list_schedules(database_url: str | None) -> int:
    """List the schedules: rule, time zone, next ticks, last run, paused or not."""
    with connected(database_url), db.session() as session:
        rows = session.scalars(select(schedules.Schedule).order_by(schedules.Schedule.name)).all()
        if not rows:
            click.echo(
                "no schedules yet: declare one with engine.schedule(...) or `stepwise schedules create`"
            )
        now = clock.now()
        for row in rows:
            found = session.execute(
                select(schedules.Tick, Invocation.action_id)
                .outerjoin(Invocation, Invocation.id == schedules.Tick.invocation_id)
                .where(schedules.Tick.schedule_id == row.id)
                .order_by(schedules.Tick.id.desc())
                .limit(1)
            ).first()
            last, action_id = found if found is not None else (None, None)
            state = f"paused by {row.paused_by or 'someone'}" if row.paused else "active"
            upcoming = (
                ", ".join(f"{t:%Y-%m-%d %H:%M:%S}" for t in row.rule.upcoming(now, 3))
                if not row.paused
                else "-"
            )
            last_run = f"{last.outcome} {last.due_at:%Y-%m-%d %H:%M:%S}" if last is not None else "never ran"
            if action_id is not None:
                last_run += f" (action {action_id})"
            click.echo(
                f"{row.name}  [{state}, {row.source}]  {row.rule.describe()}  -> "
                f"{row.actor_type}/{row.actor_id}.{row.action}{json.dumps(row.arguments)}\n"
                f"    next (UTC): {upcoming}; last: {last_run}; missed: {row.missed}, overlap: {row.overlap}"
            )
    return 0


@schedules_group.command("create")
@NAME
@click.option("--cron", metavar="EXPR", help="a cron expression, read in --timezone (e.g. '0 2 * * *')")
@click.option("--every", type=int, metavar="SECONDS", help="an interval instead of a cron expression")
@click.option("--timezone", default=schedules.DEFAULT_TIMEZONE, show_default=True, metavar="ZONE")
@click.option("--actor-type", required=True, metavar="TYPE", help="the actor's type (its class name)")
@click.option(
    "--actor-id", required=True, metavar="ID", help="the actor's id (a service's id, or a row's key)"
)
@click.option("--action", required=True, metavar="NAME", help="the action the schedule starts")
@click.option(
    "--args", "args_json", default="[]", metavar="JSON", help="the action's arguments, a JSON array"
)
@click.option("--missed", type=click.Choice(MISSED_POLICIES), default=SKIP, show_default=True)
@click.option("--overlap", type=click.Choice(OVERLAP_POLICIES), default=SKIP, show_default=True)
@BY
@REASON
@IMPORTS
@DATABASE_URL
def create(
    name: str,
    cron: str | None,
    every: int | None,
    timezone: str,
    actor_type: str,
    actor_id: str,
    action: str,
    args_json: str,
    missed: str,
    overlap: str,
    by: str | None,
    reason: str | None,
    imports: tuple[str, ...],
    database_url: str | None,
) -> int:
    """Create a schedule that starts ACTION on an actor at each tick of its rule."""
    args = json_array("--args", args_json)
    with connected(database_url, imports), refused():
        made = schedules.create(
            name,
            actor_type=actor_type,
            actor_id=actor_id,
            action=action,
            args=args,
            cron=cron,
            every=every,
            timezone=timezone,
            missed=missed,
            overlap=overlap,
            by=operator(by),
            reason=reason,
        )
        when = f"{made.next_fire_at:%Y-%m-%d %H:%M:%S} UTC" if made.next_fire_at else "never"
        click.echo(f"Created schedule {made.name}: {made.rule.describe()}; next tick {when}")
    return 0


def json_array(option: str, text: str) -> list[Any]:
    try:
        value: Any = json.loads(text)
    except ValueError as error:
        raise CommandFailed(f"{option} is not valid JSON: {error}; nothing was changed") from error
    if not isinstance(value, list):
        raise CommandFailed(f'{option} must be a JSON array, like ["daily"]; nothing was changed')
    return value


def shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, list) else "-" if value is None else str(value)


@schedules_group.command("edit")
@NAME
@click.option("--cron", metavar="EXPR", help="a new cron expression (replaces an interval)")
@click.option("--every", type=int, metavar="SECONDS", help="a new interval (replaces a cron expression)")
@click.option("--timezone", metavar="ZONE", help="a new time zone the cron expression is read in")
@click.option("--args", "args_json", metavar="JSON", help="new arguments, a JSON array")
@click.option("--missed", type=click.Choice(MISSED_POLICIES))
@click.option("--overlap", type=click.Choice(OVERLAP_POLICIES))
@BY
@REASON
@IMPORTS
@DATABASE_URL
def edit(
    name: str,
    cron: str | None,
    every: int | None,
    timezone: str | None,
    args_json: str | None,
    missed: str | None,
    overlap: str | None,
    by: str | None,
    reason: str | None,
    imports: tuple[str, ...],
    database_url: str | None,
) -> int:
    """Change a schedule in place (what is not given stays); a new rule or time zone ticks
    from now on: no tick due before the edit runs. A schedule declared in code is changed
    in the code."""
    args = json_array("--args", args_json) if args_json is not None else None
    if cron is not None and every is not None:
        raise CommandFailed("give --cron or --every, not both; nothing was changed")
    with connected(database_url, imports), refused():
        edited = schedules.edit(
            name,
            cron=cron if cron is not None else schedules.UNSET,
            every=every if every is not None else schedules.UNSET,
            timezone=timezone,
            args=args,
            missed=missed,
            overlap=overlap,
            by=operator(by),
            reason=reason,
        )
    if not edited.changed:
        click.echo(f"stepwise: edit {name} changed nothing: it is so already", err=True)
        return 1
    made = edited.schedule
    when = f"{made.next_fire_at:%Y-%m-%d %H:%M:%S} UTC" if made.next_fire_at else "never"
    changes = "; ".join(f"{key} {shown(old)} -> {shown(new)}" for key, (old, new) in edited.changes.items())
    click.echo(f"Edited schedule {made.name}: {changes}. {made.rule.describe()}; next tick {when}")
    return 0


def _simple(verb: str, done: str, unchanged: str) -> Any:
    @schedules_group.command(verb)
    @NAME
    @BY
    @REASON
    @IMPORTS
    @DATABASE_URL
    def command(
        name: str, by: str | None, reason: str | None, imports: tuple[str, ...], database_url: str | None
    ) -> int:
        with connected(database_url, imports), refused():
            changed = getattr(schedules, verb)(name, by=operator(by), reason=reason)
        if changed is False:
            click.echo(f"stepwise: {verb} {name} changed nothing: {unchanged}", err=True)
            return 1
        click.echo(f"{done} {name}" + (f" (invocation {changed.invocation_id})" if verb == "trigger" else ""))
        return 0

    command.__doc__ = {
        "pause": "Pause a schedule: its ticks stop until it is resumed.",
        "resume": "Resume a paused schedule from now: the ticks due while paused are not run.",
        "trigger": "Run a schedule's action now (a manual run, whatever its overlap policy).",
        "delete": "Delete a schedule and its ticks (the actions it started stay).",
    }[verb]
    command.help = command.__doc__
    return command


pause = _simple("pause", "Paused", "it is paused already")
resume = _simple("resume", "Resumed", "it is not paused")
trigger = _simple("trigger", "Triggered", "")
delete = _simple("delete", "Deleted", "")


@cli.command("clock")
@click.option(
    "--every", type=float, metavar="SECONDS", help="sweep every SECONDS and fire schedules, until stopped"
)
@click.option(
    "--poll",
    type=float,
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="look for due schedules at least this often (it also wakes for the next due tick)",
)
@click.option(
    "--grace",
    type=float,
    default=sweeper.GRACE.total_seconds(),
    show_default=True,
    metavar="SECONDS",
    help="the sweeper leaves alone work due for less than SECONDS",
)
@IMPORTS
@DATABASE_URL
def clock_process(
    every: float | None, poll: float, grace: float, imports: tuple[str, ...], database_url: str | None
) -> int:
    """The clock process: sync the schedules declared in code (--import), then fire due
    schedules (each tick once, however many clocks run), sweep lost work every SECONDS and
    prune old ticks every hour (each schedule keeps its newest 1,000).

    Without --every, one round and exit. Any number may run: the schedules' row locks and
    unique tick rows keep each tick to one run.
    """
    if not (os.environ.get("REDIS_URL") or os.environ.get("RABBITMQ_URL")):
        raise CommandFailed(
            "stepwise clock needs the broker the workers read: set REDIS_URL (or RABBITMQ_URL); "
            "without one, the actions it starts go to an in-memory broker no worker sees"
        )
    broker.setup()
    import_modules(imports)
    with database(database_url, must_exist=True, pool_pre_ping=True) as sa_engine:
        db.configure(sa_engine)
        print(schedules.sync(), flush=True)
        next_sweep = next_prune = time.monotonic()
        while True:
            try:
                fired = schedules.tick()
                if fired.fired or fired.skipped or fired.missed:
                    print(fired, flush=True)
                if time.monotonic() >= next_sweep:
                    with db.session() as session:
                        report = sweeper.sweep(session, grace=timedelta(seconds=grace))
                    if report.total or every is None:
                        print(report, flush=True)
                    next_sweep = time.monotonic() + (every or 0)
                if time.monotonic() >= next_prune:
                    pruned = schedules.prune()
                    if pruned:
                        print(f"schedules: pruned {pruned} old ticks", flush=True)
                    next_prune = time.monotonic() + retention.EVERY_SECONDS
                soonest = fired.next_at
            except sa_exc.DBAPIError as error:
                if every is None:
                    raise
                print(
                    f"stepwise: the clock's round failed, trying again: {error.orig}",
                    file=sys.stderr,
                    flush=True,
                )
                soonest = None
            if every is None:
                return 0
            wait = min(poll, max(next_sweep - time.monotonic(), 0.0))
            if soonest is not None:
                wait = min(wait, max((soonest - clock.now()).total_seconds(), 0.0))
            time.sleep(max(wait, 0.05))
