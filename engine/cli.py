"""The ``stepwise`` command: operator tasks, one function each.

    stepwise db upgrade [--database-url URL]            apply the engine's migrations
    stepwise db current [--database-url URL]            print the revision the database is at
    stepwise db stamp REVISION [--database-url URL]     record a revision without migrating
    stepwise sweep [--every SECONDS] [--grace SECONDS]  send again the work whose message was lost
    stepwise worker [MODULE...] [-p N] [-t N] [--idle-poll MS]  run Dramatiq workers for the engine's jobs
    stepwise clock [--every SECONDS] [--import MODULE]  fire due schedules and sweep (the clock process)
    stepwise schedules list|create|pause|resume|trigger|delete  operators' commands on schedules

Other packages add commands through the ``stepwise.commands`` entry-point group (the studio
adds ``serve`` and ``users``). ``stepwise --help`` lists them all.

A command is a click command of the ``cli`` group (engine/cli_base.py) that returns its exit
status: 0 done, 1 the command failed (stderr says why and what to do), 2 wrong usage.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from datetime import timedelta

import click
from sqlalchemy import exc as sa_exc

from . import broker, cli_operator, cli_schedules, cli_signals, db, migrate, sweeper
from .cli_base import (
    DATABASE_URL,
    GROUPS,
    CommandFailed,
    argument,
    cli,
    command,
    database,
    group,
    main,
    name,
)

__all__ = [
    "DATABASE_URL",
    "GROUPS",
    "CommandFailed",
    "argument",
    "cli",
    "cli_operator",
    "cli_schedules",
    "cli_signals",
    "command",
    "database",
    "main",
]

db_group = group("db")


@db_group.command("upgrade")
@DATABASE_URL
def db_upgrade(database_url: str | None) -> int:
    """Apply the engine's migrations: create or update the stepwise_* tables.

    Safe to run again: a database already at the newest revision is left as it is.
    """
    with database(database_url) as sa_engine:
        before = migrate.current(sa_engine)
        migrate.upgrade(sa_engine)
        after = migrate.current(sa_engine)
        if before == after:
            print(f"{name(sa_engine)} is already at {after} (head)")
        else:
            print(f"Upgraded {name(sa_engine)} from {before or 'an empty database'} to {after} (head)")
    return 0


@db_group.command("current")
@DATABASE_URL
def db_current(database_url: str | None) -> int:
    """Print the revision the database is at, and whether it is the newest."""
    with database(database_url, must_exist=True) as sa_engine:
        revision, head = migrate.current(sa_engine), migrate.head()
        if revision is None and migrate.tables_present(sa_engine):
            print("none (the tables were made by engine.create_all(): see `stepwise db stamp --help`)")
        elif revision is None:
            print("none (no migration applied: run `stepwise db upgrade`)")
        elif revision == head:
            print(f"{revision} (head)")
        else:
            print(f"{revision} (the newest is {head}: run `stepwise db upgrade`)")
    return 0


@db_group.command("stamp")
@click.argument("revision", metavar="REVISION")
@DATABASE_URL
def db_stamp(revision: str, database_url: str | None) -> int:
    """Record that the tables are at REVISION (usually 'head') without running any migration.

    For tables made by engine.create_all() from the same version of Stepwise: afterwards
    `stepwise db upgrade` applies only the migrations that come later.
    """
    with database(database_url, must_exist=True) as sa_engine:
        migrate.stamp(sa_engine, revision)
        print(f"Stamped {name(sa_engine)} at {migrate.current(sa_engine)}")
    return 0


# Workers and the sweeper -------------------------------------------------------------


def require_broker(what: str) -> None:
    if not (os.environ.get("REDIS_URL") or os.environ.get("RABBITMQ_URL")):
        raise CommandFailed(
            f"{what} needs the broker the workers read: set REDIS_URL (or RABBITMQ_URL); "
            "without one, messages go to an in-memory broker no other process sees"
        )


@cli.command("sweep")
@click.option("--every", type=float, metavar="SECONDS", help="sweep again every SECONDS, until stopped")
@click.option(
    "--grace",
    type=float,
    default=sweeper.GRACE.total_seconds(),
    show_default=True,
    metavar="SECONDS",
    help="leave alone work due for less than SECONDS: its message may be on its way",
)
@DATABASE_URL
def sweep(every: float | None, grace: float, database_url: str | None) -> int:
    """Send again the work that is due but was not picked up: lost messages, killed workers.

    Every job ignores a message it already handled, so sending twice is safe. Run it once,
    or with --every as a clock process beside the workers. A sweep that fails (the database
    restarting) is tried again at the next round.
    """
    require_broker("stepwise sweep")
    broker.setup()
    with database(database_url, must_exist=True, pool_pre_ping=True) as sa_engine:
        db.configure(sa_engine)
        while True:
            try:
                with db.session() as session:
                    report = sweeper.sweep(session, grace=timedelta(seconds=grace))
                print(report, flush=True)
            except sa_exc.DBAPIError as error:
                if every is None:
                    raise
                print(f"stepwise: the sweep failed, trying again: {error.orig}", file=sys.stderr, flush=True)
            if every is None:
                return 0
            time.sleep(every)


#: ``stepwise worker --idle-poll``: how late a due delayed message may be sent on, and how
#: long an idle Redis consumer waits on its doorbell before it fetches again (the wait of a
#: message sent without a ring). Dramatiq's own default is 1000 ms.
IDLE_POLL_MS = 100
#: ``stepwise worker --threads``: threads per process. Threads mostly wait for the group-commit
#: batch their transition is in (a thread waits for its own transition to commit before its
#: message is acknowledged), so the more of them a process runs, the more transitions share
#: each batch: measured with bench/throughput.py on 2 cores, 64 threads drained 1.4x the
#: actions per second of 32, at 0.7x the worker CPU and 0.6x the PostgreSQL CPU per action
#: (128 exceed redis-py's 100 connections per process, and slow raw Dramatiq by half).
WORKER_THREADS = 64
#: By default one machine's worker processes run this many threads in all
#: (``default_threads``), never fewer than Dramatiq's 8 each.
MACHINE_THREADS = 128
#: By default one machine's worker processes keep at most this many database connections in
#: all, + 2 each (``default_pool_size``): within PostgreSQL's default max_connections of 100
#: with room for the studio and the clock. A thread holds one only while a step body or a
#: transition of its own runs, never while it waits for a batch, so threads beyond the pool
#: wait their turn for a connection only when their bodies query at once.
MACHINE_CONNECTIONS = 64
#: The environment variable Dramatiq reads its worker timeout from (lower case, its name).
WORKER_TIMEOUT_VARIABLE = "dramatiq_worker_timeout"


@cli.command("worker")
@click.argument("modules", nargs=-1, metavar="[MODULE]...")
@click.option("-p", "--processes", type=int, metavar="N", help="worker processes (Dramatiq's default: CPUs)")
@click.option(
    "-t",
    "--threads",
    type=click.IntRange(min=1),
    metavar="N",
    help=(
        f"threads per process (default {MACHINE_THREADS} ÷ processes, from 8 to "
        f"{WORKER_THREADS}: {WORKER_THREADS} for 2 processes)"
    ),
)
@click.option(
    "--idle-poll",
    type=int,
    default=IDLE_POLL_MS,
    metavar="MS",
    help=(
        f"an idle Redis worker's longest wait before it fetches again, and how late a due "
        f"delayed message may be sent on (default {IDLE_POLL_MS})"
    ),
)
def worker(modules: tuple[str, ...], processes: int | None, threads: int | None, idle_poll: int) -> int:
    """Run Dramatiq worker processes for the engine's jobs: `dramatiq engine.jobs MODULE...`.

    Each MODULE is imported by every worker: those defining your actors.

    Each process imports engine.jobs and your modules, reads DATABASE_URL and REDIS_URL (or
    RABBITMQ_URL), and reconnects after a restart of the database or of the broker. An idle
    Redis consumer waits on its queue's doorbell, rung by every message the engine sends, for
    up to --idle-poll milliseconds (Dramatiq's worker timeout) before it fetches again.

    Each process keeps at most 64 ÷ processes (from 8), or --threads if fewer, + 2 PostgreSQL
    connections (STEPWISE_POOL_SIZE): a thread holds one while a step body runs, and the
    process's shared batch one more; a thread that finds none free waits for one.
    """
    require_broker("stepwise worker")
    threads = threads or default_threads(processes)
    os.environ[WORKER_TIMEOUT_VARIABLE] = str(idle_poll)
    os.environ.setdefault(db.POOL_SIZE_VARIABLE, str(default_pool_size(processes, threads)))
    os.execv(sys.executable, worker_command(modules, processes, threads))


def default_threads(processes: int | None) -> int:
    """Threads per process when none are given: ``MACHINE_THREADS`` shared by the processes
    (Dramatiq runs one per CPU by default), from 8 to ``WORKER_THREADS`` each."""
    count = processes or multiprocessing.cpu_count()
    return max(8, min(WORKER_THREADS, MACHINE_THREADS // max(count, 1)))


def default_pool_size(processes: int | None, threads: int) -> int:
    """Connections per process when ``STEPWISE_POOL_SIZE`` is not set: ``MACHINE_CONNECTIONS``
    shared by the processes (from 8 each), no more than its threads, + 2 (the shared batch,
    and a transition of the process's own: a claim's keeper, a give-up)."""
    count = processes or multiprocessing.cpu_count()
    return min(threads, max(8, MACHINE_CONNECTIONS // max(count, 1))) + 2


def worker_command(modules: tuple[str, ...], processes: int | None, threads: int | None) -> list[str]:
    command = [sys.executable, "-m", "dramatiq", "engine.jobs", *modules]
    if processes is not None:
        command += ["--processes", str(processes)]
    if threads is not None:
        command += ["--threads", str(threads)]
    return command


if __name__ == "__main__":
    sys.exit(main())
