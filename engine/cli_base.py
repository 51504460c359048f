"""The ``stepwise`` command's framework, on click (Flask's own CLI library): the ``cli``
group every command joins, ``group`` for a group of commands (``stepwise db …``), the
shared ``--database-url`` option, and ``main``, which turns the engine's errors into a
message and exit status 1 (2 for wrong usage, 130 for Ctrl-C).

The commands themselves live in engine/cli.py (database, workers, sweeper), in
engine/cli_operator.py (operator verbs) and in packages of the ``stepwise.commands``
entry-point group (the studio). ``command`` and ``argument`` also declare a command the
argparse way (engine/cli_operator.py still does): each argument becomes a click parameter,
and the function is called with an ``argparse.Namespace`` of them.
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
from typing import Any, TypeVar

import click
from alembic.util import CommandError
from sqlalchemy import create_engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine, make_url

from . import __version__, db, sqlite_leftovers
from .errors import EngineError

Run = Callable[[argparse.Namespace], int]
F = TypeVar("F", bound=Callable[..., Any])


class CommandFailed(Exception):
    """Raised when a command cannot do its work; the message says what to do about it."""


class Group(click.Group):
    """A group whose commands fail with ``stepwise: error: <what to do>`` and exit status 1
    on the errors an operator can act on, never with a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (CommandFailed, EngineError, CommandError) as error:
            return fail(str(error))
        except sa_exc.DBAPIError as error:
            return fail(f"the database refused: {error.orig}")
        except KeyboardInterrupt:
            return 130


@click.group(cls=Group, name="stepwise", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="stepwise", message="%(prog)s %(version)s")
def cli() -> None:
    """Stepwise: durable action trees on SQLAlchemy models."""


#: The help line of each group of commands declared by path (``command("db upgrade")``).
GROUPS = {"db": "the engine's tables: migrations"}


def group(name: str, help_text: str | None = None) -> click.Group:
    """The group ``stepwise <name>`` (made on first use)."""
    found = cli.commands.get(name)
    if isinstance(found, click.Group):
        return found
    made = Group(name, help=help_text or GROUPS.get(name), short_help=help_text or GROUPS.get(name))
    cli.add_command(made)
    return made


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``stepwise ARGV`` (default: the process's arguments) and return its exit status;
    wrong usage exits with status 2, after saying what is wrong."""
    load_plugins()
    try:
        status = cli.main(
            args=list(argv) if argv is not None else None, prog_name="stepwise", standalone_mode=False
        )
    except click.UsageError as error:
        error.show()
        raise SystemExit(error.exit_code) from None
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except click.Abort:
        return 130
    return status if isinstance(status, int) else 0


#: The entry-point group of modules that add commands, such as the studio's ``app.cli``
#: (``stepwise serve``, ``stepwise users``): the engine never imports them itself.
PLUGIN_GROUP = "stepwise.commands"
_plugins_loaded = False


def load_plugins() -> None:
    """Import, once, each module registered under ``PLUGIN_GROUP``: its commands join."""
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


def fail(message: str) -> int:
    print(f"stepwise: error: {message}", file=sys.stderr)
    return 1


# Commands declared the argparse way ---------------------------------------------------


@dataclass(frozen=True)
class Argument:
    """A parameter declared as for ``ArgumentParser.add_argument``; also a decorator that
    adds it to a click command (``@DATABASE_URL``)."""

    flags: tuple[str, ...]
    options: dict[str, Any]

    def __call__(self, function: F) -> F:
        return self.parameter()(function)  # type: ignore[no-any-return]

    def parameter(self) -> Callable[[Any], Any]:
        options = dict(self.options)
        action = options.pop("action", None)
        dest = options.pop("dest", None)
        choices = options.pop("choices", None)
        nargs = options.pop("nargs", None)
        help_text = options.pop("help", None)
        if help_text is not None and "%(default)s" in help_text:
            help_text = help_text % {"default": options.get("default")}
        if choices is not None:
            options["type"] = click.Choice(list(choices))
        if not self.flags[0].startswith("-"):
            options.setdefault("metavar", self.flags[0].upper())
            name = dest or self.flags[0]
            if nargs == "*":
                options["nargs"], options["required"] = -1, False
            return click.argument(name, **options)
        declared = [*self.flags, *([dest] if dest else [])]
        if action == "store_true":
            options["is_flag"] = True
        elif action == "append":
            options["multiple"] = True
            options["default"] = tuple(options.get("default") or ())
        return click.option(*declared, help=help_text, **options)

    @property
    def positional(self) -> bool:
        return not self.flags[0].startswith("-")

    def described(self) -> str | None:
        """The help line of a positional argument (click's have none of their own)."""
        if not self.positional or not self.options.get("help"):
            return None
        shown = self.options.get("metavar") or self.flags[0].upper()
        choices = self.options.get("choices")
        listed = f" (one of {', '.join(choices)})" if choices else ""
        return f"{shown}: {self.options['help']}{listed}"


def argument(*flags: str, **options: Any) -> Argument:
    """An argument of a command, declared as for ``ArgumentParser.add_argument``."""
    return Argument(flags, options)


def command(path: str, *arguments: Argument) -> Callable[[Run], Run]:
    """Register the decorated function as ``stepwise <path>``; its docstring is the help, and
    it is called with an ``argparse.Namespace`` of its arguments. Registering a path again
    replaces it (``python -m engine.cli`` runs the module twice: as __main__, then imported)."""

    def register(run: Run) -> Run:
        *parents, name = path.split()
        doc = inspect.getdoc(run) or ""
        lines = [a.described() for a in arguments if a.described()]
        if lines:
            doc += "\n\n\b\n" + "\n".join(line for line in lines if line)

        def call(**values: Any) -> int:
            values = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
            return run(argparse.Namespace(**values))

        for arg in reversed(arguments):  # as stacked decorators: the first one on top
            call = arg.parameter()(call)
        made = click.command(name, help=doc, short_help=doc.split("\n")[0])(call)
        parent: click.Group = cli
        for part in parents:
            parent = group(part) if parent is cli else _subgroup(parent, part)
        parent.add_command(made)
        return run

    return register


def _subgroup(parent: click.Group, name: str) -> click.Group:
    found = parent.commands.get(name)
    if isinstance(found, click.Group):
        return found
    made = Group(name)
    parent.add_command(made)
    return made


# The database -------------------------------------------------------------------------

#: ``--database-url URL``: a command's database (``database(url)`` opens it).
DATABASE_URL = argument(
    "--database-url",
    metavar="URL",
    help=f"the database (default: $DATABASE_URL, else {db.DEFAULT_URL})",
)


@contextmanager
def database(given: Any, must_exist: bool = False, **engine_options: Any) -> Iterator[Engine]:
    """The database named by ``--database-url`` (``given``: the URL, or the parsed arguments
    holding ``database_url``), else ``DATABASE_URL``, else the default SQLite file; checked
    reachable. A command's own engine: the engine's global one is left alone."""
    url_given = given if given is None or isinstance(given, str) else given.database_url
    if url_given:
        url, source = url_given, "--database-url"
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
    if is_file:
        try:
            removed = sqlite_leftovers.clear(Path(path))
        except sqlite_leftovers.LeftoversInUse as error:
            raise CommandFailed(str(error)) from error
        if removed:
            print(
                f"stepwise: note: there was no database at {path}: removed what its deleted file left "
                f"behind ({', '.join(f.name for f in removed)})",
                file=sys.stderr,
            )
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
