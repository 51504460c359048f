"""The ``stepwise`` command: operator tasks, one function each.

    stepwise db upgrade [--database-url URL]            apply the engine's migrations
    stepwise db current [--database-url URL]            print the revision the database is at
    stepwise db stamp REVISION [--database-url URL]     record a revision without migrating
    stepwise sweep [--every SECONDS] [--grace SECONDS]  send again the work whose message was lost
    stepwise worker [MODULE...] [-p N] [-t N] [--idle-poll MS]  run Dramatiq workers for the engine's jobs

Other packages add commands through the ``stepwise.commands`` entry-point group (the studio
adds ``serve`` and ``users``).

A command is a function registered with ``@command("group name", arguments...)``: it takes
the parsed arguments and returns the exit status. Exit status: 0 done, 1 the command failed
(stderr says why and what to do), 2 wrong usage.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alembic.util import CommandError
from sqlalchemy import create_engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine, make_url

from . import __version__, db, migrate, sweeper
from .errors import EngineError

Run = Callable[[argparse.Namespace], int]
if TYPE_CHECKING:
    SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]


class CommandFailed(Exception):
    """Raised when a command cannot do its work; the message says what to do about it."""


@dataclass(frozen=True)
class Argument:
    flags: tuple[str, ...]
    options: dict[str, Any]


def argument(*flags: str, **options: Any) -> Argument:
    """An argument of a command, declared as for ``ArgumentParser.add_argument``."""
    return Argument(flags, options)


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]
    run: Run
    arguments: tuple[Argument, ...]


#: Every command, in the order the help lists them.
COMMANDS: list[Command] = []

#: The help line of each group of commands.
GROUPS = {"db": "the engine's tables: migrations"}


def command(path: str, *arguments: Argument) -> Callable[[Run], Run]:
    """Register the decorated function as ``stepwise <path>``; its docstring is the help."""

    def register(run: Run) -> Run:
        COMMANDS.append(Command(tuple(path.split()), run, arguments))
        return run

    return register


def main(argv: Sequence[str] | None = None) -> int:
    load_plugins()
    args = build_parser().parse_args(argv)
    run: Run = args.run
    try:
        return run(args)
    except (CommandFailed, EngineError, CommandError) as error:
        return fail(str(error))
    except sa_exc.DBAPIError as error:
        return fail(f"the database refused: {error.orig}")
    except KeyboardInterrupt:
        return 130


#: The entry-point group of modules that add commands, such as the studio's ``app.cli``
#: (``stepwise serve``, ``stepwise users``): the engine never imports them itself.
PLUGIN_GROUP = "stepwise.commands"
_plugins_loaded = False


def load_plugins() -> None:
    """Import, once, each module registered under ``PLUGIN_GROUP``: its ``@command``s join."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    from importlib.metadata import entry_points

    for entry in entry_points(group=PLUGIN_GROUP):
        try:
            entry.load()
        except ImportError as error:
            print(f"stepwise: note: the commands of {entry.value} are unavailable: {error}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stepwise", description="Stepwise: durable action trees on SQLAlchemy models."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers: dict[tuple[str, ...], SubParsers] = {(): add_subparsers(parser)}
    for cmd in COMMANDS:
        for depth in range(1, len(cmd.path)):
            group = cmd.path[:depth]
            if group not in subparsers:
                text = GROUPS.get(" ".join(group))
                group_parser = subparsers[group[:-1]].add_parser(group[-1], help=text, description=text)
                subparsers[group] = add_subparsers(group_parser)
        doc = inspect.getdoc(cmd.run) or ""
        sub = subparsers[cmd.path[:-1]].add_parser(cmd.path[-1], help=doc.split("\n")[0], description=doc)
        for arg in cmd.arguments:
            sub.add_argument(*arg.flags, **arg.options)
        sub.set_defaults(run=cmd.run)
    return parser


def add_subparsers(parser: argparse.ArgumentParser) -> SubParsers:
    return parser.add_subparsers(title="commands", dest="command", metavar="COMMAND", required=True)


def fail(message: str) -> int:
    print(f"stepwise: error: {message}", file=sys.stderr)
    return 1


# The database -------------------------------------------------------------------------

DATABASE_URL = argument(
    "--database-url",
    metavar="URL",
    help=f"the database (default: $DATABASE_URL, else {db.DEFAULT_URL})",
)


@contextmanager
def database(args: argparse.Namespace, must_exist: bool = False, **engine_options: Any) -> Iterator[Engine]:
    """The database named by ``--database-url``, else ``DATABASE_URL``, else the default
    SQLite file; checked reachable. A command's own engine: the engine's global one is left
    alone."""
    if args.database_url:
        url, source = args.database_url, "--database-url"
    elif os.environ.get("DATABASE_URL"):
        url, source = os.environ["DATABASE_URL"], "DATABASE_URL"
    else:
        url, source = db.DEFAULT_URL, "the default"
    try:
        parsed = make_url(db.normalize_url(url))
    except sa_exc.ArgumentError as error:
        # The message leaves the URL out: it may carry a password.
        raise CommandFailed(f"invalid database URL (from {source}): {error}") from error
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise CommandFailed(
            f"Stepwise runs on SQLite and PostgreSQL, but the URL from {source} names a "
            f"{parsed.get_backend_name()} database"
        )
    try:
        sa_engine = create_engine(parsed, **engine_options)
    except (sa_exc.ArgumentError, ImportError) as error:
        raise CommandFailed(f"cannot use the database URL from {source}: {error}") from error
    path = sa_engine.url.database or ""
    is_file = sa_engine.dialect.name == "sqlite" and path not in ("", ":memory:")
    if must_exist and is_file and not Path(path).exists():
        # Connecting would create an empty file and report "no migration applied".
        raise CommandFailed(f"there is no database at {path}: run `stepwise db upgrade` to create it")
    try:
        with sa_engine.connect():
            pass
    except sa_exc.DBAPIError as error:
        raise CommandFailed(
            f"cannot open the database {name(sa_engine)} (from {source}): {error.orig}"
        ) from error
    # Drop the checked connection: those the command uses are opened after it configures
    # the engine (SQLite's foreign keys and locking are set per connection).
    sa_engine.dispose()
    try:
        yield sa_engine
    finally:
        sa_engine.dispose()


def name(sa_engine: Engine) -> str:
    return sa_engine.url.render_as_string(hide_password=True)


@command("db upgrade", DATABASE_URL)
def db_upgrade(args: argparse.Namespace) -> int:
    """Apply the engine's migrations: create or update the stepwise_* tables.

    Safe to run again: a database already at the newest revision is left as it is.
    """
    with database(args) as sa_engine:
        before = migrate.current(sa_engine)
        migrate.upgrade(sa_engine)
        after = migrate.current(sa_engine)
        if before == after:
            print(f"{name(sa_engine)} is already at {after} (head)")
        else:
            print(f"Upgraded {name(sa_engine)} from {before or 'an empty database'} to {after} (head)")
    return 0


@command("db current", DATABASE_URL)
def db_current(args: argparse.Namespace) -> int:
    """Print the revision the database is at, and whether it is the newest."""
    with database(args, must_exist=True) as sa_engine:
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


@command(
    "db stamp",
    argument("revision", metavar="REVISION", help="the revision the tables match, usually 'head'"),
    DATABASE_URL,
)
def db_stamp(args: argparse.Namespace) -> int:
    """Record that the tables are at REVISION without running any migration.

    For tables made by engine.create_all() from the same version of Stepwise: afterwards
    `stepwise db upgrade` applies only the migrations that come later.
    """
    with database(args, must_exist=True) as sa_engine:
        migrate.stamp(sa_engine, args.revision)
        print(f"Stamped {name(sa_engine)} at {migrate.current(sa_engine)}")
    return 0


# Workers and the sweeper -------------------------------------------------------------


def require_broker(what: str) -> None:
    if not (os.environ.get("REDIS_URL") or os.environ.get("RABBITMQ_URL")):
        raise CommandFailed(
            f"{what} needs the broker the workers read: set REDIS_URL (or RABBITMQ_URL); "
            "without one, messages go to an in-memory broker no other process sees"
        )


@command(
    "sweep",
    argument("--every", type=float, metavar="SECONDS", help="sweep again every SECONDS, until stopped"),
    argument(
        "--grace",
        type=float,
        default=sweeper.GRACE.total_seconds(),
        metavar="SECONDS",
        help="leave alone work due for less than SECONDS: its message may be on its way "
        "(default: %(default)s)",
    ),
    DATABASE_URL,
)
def sweep(args: argparse.Namespace) -> int:
    """Send again the work that is due but was not picked up: lost messages, killed workers.

    Every job ignores a message it already handled, so sending twice is safe. Run it once,
    or with --every as a clock process beside the workers. A sweep that fails (the database
    restarting) is tried again at the next round.
    """
    require_broker("stepwise sweep")
    from . import broker

    broker.setup()
    grace = timedelta(seconds=args.grace)
    with database(args, must_exist=True, pool_pre_ping=True) as sa_engine:
        db.configure(sa_engine)
        while True:
            try:
                with db.session() as session:
                    report = sweeper.sweep(session, grace=grace)
                print(report, flush=True)
            except sa_exc.DBAPIError as error:
                if args.every is None:
                    raise
                print(f"stepwise: the sweep failed, trying again: {error.orig}", file=sys.stderr, flush=True)
            if args.every is None:
                return 0
            time.sleep(args.every)


#: ``stepwise worker --idle-poll``: a message sent to an idle worker waits at most about this
#: long (Dramatiq's own default is 1000 ms; lower costs an idle process more Redis polls).
IDLE_POLL_MS = 100
#: The environment variable Dramatiq reads its worker timeout from (lower case, its name).
WORKER_TIMEOUT_VARIABLE = "dramatiq_worker_timeout"


@command(
    "worker",
    argument("modules", nargs="*", metavar="MODULE", help="modules to import: those defining your actors"),
    argument("-p", "--processes", type=int, metavar="N", help="worker processes (Dramatiq's default: CPUs)"),
    argument("-t", "--threads", type=int, metavar="N", help="threads per process (Dramatiq's default: 8)"),
    argument(
        "--idle-poll",
        type=int,
        default=IDLE_POLL_MS,
        metavar="MS",
        help=f"an idle worker's longest wait between polls of Redis (default {IDLE_POLL_MS})",
    ),
)
def worker(args: argparse.Namespace) -> int:
    """Run Dramatiq worker processes for the engine's jobs: `dramatiq engine.jobs MODULE...`.

    Each process imports engine.jobs and your modules, reads DATABASE_URL and REDIS_URL (or
    RABBITMQ_URL), and reconnects after a restart of the database or of the broker. An idle
    Redis consumer backs off between polls up to --idle-poll milliseconds (Dramatiq's worker
    timeout): the wait a message sent to an idle worker may see before it is picked up.
    """
    require_broker("stepwise worker")
    os.environ[WORKER_TIMEOUT_VARIABLE] = str(args.idle_poll)
    os.execv(sys.executable, worker_command(args))


def worker_command(args: argparse.Namespace) -> list[str]:
    command = [sys.executable, "-m", "dramatiq", "engine.jobs", *args.modules]
    if args.processes is not None:
        command += ["--processes", str(args.processes)]
    if args.threads is not None:
        command += ["--threads", str(args.threads)]
    return command


from . import cli_operator  # noqa: E402, F401 - registers the operator's commands

if __name__ == "__main__":
    # Run as ``python -m engine.cli``: use the importable module, where every command is.
    from engine.cli import main as registered_main

    sys.exit(registered_main())
