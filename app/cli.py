"""The studio's ``stepwise`` commands, added to the engine's through the ``stepwise.commands``
entry point (the engine never imports the studio).

    stepwise serve [--host H] [--port P] [--demo] [--import MODULE]   run the studio
    stepwise users create NAME [--role operator] [--password-stdin]   add a user
    stepwise users list | delete NAME | password NAME | role NAME ROLE
"""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import secrets
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flask import Flask

import engine
from engine.cli_base import DATABASE_URL, GROUPS, CommandFailed, argument, command, database

from . import create_app, users
from .database import db

GROUPS["users"] = "the studio's users: who may sign in, as a viewer or an operator"

PASSWORD_STDIN = argument(
    "--password-stdin",
    action="store_true",
    help="read the password from the first line of standard input instead of asking for it",
)


def make_app(args: argparse.Namespace, **config: Any) -> Flask:
    """The studio on the database named by --database-url, else DATABASE_URL, else the
    default SQLite file (checked reachable first, with the engine's own messages)."""
    with database(args) as sa_engine:
        config["DATABASE_URL"] = sa_engine.url.render_as_string(hide_password=False)
    return create_app(config)


@contextmanager
def studio_tables(args: argparse.Namespace) -> Iterator[Flask]:
    """An app context on the studio for a users command; its tables are made if missing.
    The command signs no cookie, so a throwaway SECRET_KEY is fine where none is set."""
    app = make_app(args, SECRET_KEY=os.environ.get("SECRET_KEY") or secrets.token_hex(16))
    with app.app_context():
        db.create_all()
        try:
            yield app
        finally:
            db.session.remove()
            db.engine.dispose()


def read_password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise CommandFailed("no password on standard input")
        return password
    if not sys.stdin.isatty():
        raise CommandFailed(
            "there is no terminal to ask for the password: give it on standard input with --password-stdin"
        )
    password = getpass.getpass("Password: ")
    if getpass.getpass("Password again: ") != password:
        raise CommandFailed("the two passwords differ: nothing was changed")
    return password


@contextmanager
def user_errors() -> Iterator[None]:
    try:
        yield
    except users.UserError as error:
        raise CommandFailed(str(error)) from error


def existing(name: str) -> users.User:
    user = users.find(name)
    if user is None:
        raise CommandFailed(f"there is no user named {name!r} (see `stepwise users list`)")
    return user


@command(
    "users create",
    argument("name", metavar="NAME"),
    argument("--role", choices=users.ROLES, default=users.VIEWER, help="default: %(default)s"),
    PASSWORD_STDIN,
    DATABASE_URL,
)
def users_create(args: argparse.Namespace) -> int:
    """Add a user who may sign in to the studio.

    A viewer sees everything and changes nothing; an operator may also run commands
    (cancel, retry, approve, reject, forget)."""
    password = read_password(args)
    with studio_tables(args), user_errors():
        user = users.create(args.name, password, args.role)
        print(f"Created {user.role} {user.name}")
    return 0


@command("users list", DATABASE_URL)
def users_list(args: argparse.Namespace) -> int:
    """List the studio's users with their roles."""
    with studio_tables(args):
        everyone = users.everyone()
        if not everyone:
            print("no users yet: add one with `stepwise users create NAME --role operator`")
        for user in everyone:
            last = user.last_login_at.strftime("%Y-%m-%d %H:%M") if user.last_login_at else "never"
            print(f"{user.name:<24} {user.role:<9} last sign-in: {last}")
    return 0


@command("users delete", argument("name", metavar="NAME"), DATABASE_URL)
def users_delete(args: argparse.Namespace) -> int:
    """Remove a user: their open sessions end at their next request."""
    with studio_tables(args):
        db.session.delete(existing(args.name))
        db.session.commit()
        print(f"Deleted {args.name}")
    return 0


@command("users password", argument("name", metavar="NAME"), PASSWORD_STDIN, DATABASE_URL)
def users_password(args: argparse.Namespace) -> int:
    """Set a user's password."""
    password = read_password(args)
    with studio_tables(args), user_errors():
        existing(args.name).set_password(password)
        db.session.commit()
        print(f"Changed the password of {args.name}")
    return 0


@command(
    "users role",
    argument("name", metavar="NAME"),
    argument("role", choices=users.ROLES),
    DATABASE_URL,
)
def users_role(args: argparse.Namespace) -> int:
    """Make a user a viewer or an operator."""
    with studio_tables(args):
        existing(args.name).role = args.role
        db.session.commit()
        print(f"{args.name} is now {'an' if args.role == users.OPERATOR else 'a'} {args.role}")
    return 0


# --- serve --------------------------------------------------------------------------------------


@command(
    "serve",
    argument("--host", default="127.0.0.1", help="default: %(default)s"),
    argument("--port", type=int, default=5000, help="default: %(default)s"),
    argument("--demo", action="store_true", help="seed demo actors whose workflows keep running"),
    argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module defining your actors (repeatable; also $STEPWISE_IMPORTS, comma-separated)",
    ),
    argument("--threads", type=int, default=2, metavar="N", help="in-process worker threads (default: 2)"),
    DATABASE_URL,
)
def serve(args: argparse.Namespace) -> int:
    """Run the studio on http://HOST:PORT, with the engine's migrations applied first.

    Without REDIS_URL or RABBITMQ_URL this is the embedded default: Dramatiq's in-memory
    broker, an in-process worker and a sweeper, in this one process. With a broker URL,
    the workers are separate processes (`stepwise worker`, the Procfile) and so is the
    sweeper. STEPWISE_ENV defaults to development here (plain-http cookies, a throwaway
    SECRET_KEY when none is set, and a first operator `admin` when there is no user);
    production serves the studio with gunicorn: `gunicorn 'app:create_app()'`.
    """
    env = os.environ.get("STEPWISE_ENV") or "development"
    imports = [os.environ.get("STEPWISE_IMPORTS", ""), *args.imports, *(["app.demo"] if args.demo else [])]
    app = make_app(args, STEPWISE_ENV=env, STEPWISE_IMPORTS=",".join(m for m in imports if m.strip()))
    embedded = not (app.config["REDIS_URL"] or app.config["RABBITMQ_URL"])
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per (polling) request

    with app.app_context():
        engine.upgrade()
        db.create_all()
        first_user = create_first_user() if env == "development" else None
        url = db.engine.url.render_as_string(hide_password=True)

    from .embedded import Embedded

    runtime = Embedded(worker_threads=args.threads) if embedded else None
    demo = None
    if runtime is not None:
        runtime.start()
    if args.demo:
        from .demo import Demo

        demo = Demo()
        demo.start()

    print(f"Stepwise studio on http://{args.host}:{args.port}/  ({env})", flush=True)
    print(f"  database: {url}", flush=True)
    if runtime is not None:
        print(
            f"  workers:  in this process ({args.threads} threads, in-memory broker), sweeping every "
            f"{runtime.sweep_every:g}s",
            flush=True,
        )
    else:
        print("  workers:  separate processes on the broker (stepwise worker; stepwise sweep)", flush=True)
    if demo is not None:
        print("  demo:     deployments, orders and reports start every few seconds", flush=True)
        if runtime is None:
            print("            (the workers need STEPWISE_IMPORTS=app.demo)", flush=True)
    if first_user is not None:
        name, password = first_user
        print(
            f"  sign in:  {name} / {password}  (shown once: change it with `stepwise users password {name}`)",
            flush=True,
        )
    print("Press Ctrl-C to stop.", flush=True)

    signal.signal(signal.SIGTERM, _interrupt)
    from werkzeug.serving import run_simple

    try:
        run_simple(args.host, args.port, app, threaded=True, use_reloader=False, use_debugger=False)
    except KeyboardInterrupt:
        pass
    finally:
        if demo is not None:
            demo.stop()
        if runtime is not None:
            runtime.stop()
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def create_first_user() -> tuple[str, str] | None:
    """On a fresh development database, an operator ``admin`` with a random password."""
    if users.any_exists():
        return None
    password = secrets.token_urlsafe(12)
    users.create("admin", password, users.OPERATOR)
    return "admin", password
