"""The ``stepwise`` command's framework: ``@command`` registers a function under a group
and name, ``argument`` declares its options, ``main`` parses and dispatches, turning the
engine's errors into a message and exit status 1.

The commands themselves live in engine/cli.py (database, workers, sweeper), in
engine/cli_operator.py (operator verbs) and in packages of the ``stepwise.commands``
entry-point group (the studio).
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alembic.util import CommandError
from sqlalchemy import create_engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine, make_url

from . import __version__, db
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


#: Every command by its path, in the order the help lists them. Registering a path again
#: replaces it (``python -m engine.cli`` runs the module twice: as __main__, then imported).
COMMANDS: dict[tuple[str, ...], Command] = {}

#: The help line of each group of commands.
GROUPS = {"db": "the engine's tables: migrations"}


def command(path: str, *arguments: Argument) -> Callable[[Run], Run]:
    """Register the decorated function as ``stepwise <path>``; its docstring is the help."""

    def register(run: Run) -> Run:
        COMMANDS[tuple(path.split())] = Command(tuple(path.split()), run, arguments)
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
    for cmd in COMMANDS.values():
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
