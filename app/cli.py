"""The studio's ``stepwise`` commands, click commands added to the engine's ``cli`` group
through the ``stepwise.commands`` entry point (the engine never imports the studio).

    stepwise serve [--host H] [--port P] [--demo] [--import MODULE]   run the studio
    stepwise users create NAME [--role operator] [--password-stdin]   add a user
    stepwise users list | delete NAME | password NAME | role NAME ROLE
"""

from __future__ import annotations

import getpass
import logging
import os
import secrets
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
from flask import Flask
from sqlalchemy import inspect

import engine
from engine.cli_base import DATABASE_URL, CommandFailed, cli, database, group

from . import create_app
from .database import db
from .security import users

users_group = group("users", "the studio's users: who may sign in, as a viewer, an operator or an admin")

PASSWORD_STDIN = click.option(
    "--password-stdin",
    is_flag=True,
    help="read the password from the first line of standard input instead of asking for it",
)
NAME = click.argument("name", metavar="NAME")


def make_app(database_url: str | None, **config: Any) -> Flask:
    """The studio on the database named by --database-url, else DATABASE_URL, else the
    default SQLite file (checked reachable first, with the engine's own messages)."""
    with database(database_url) as sa_engine:
        config["DATABASE_URL"] = sa_engine.url.render_as_string(hide_password=False)
    return create_app(config)


@contextmanager
def studio_tables(database_url: str | None) -> Iterator[Flask]:
    """An app context on the studio for a users command. Its tables are the migrations'
    (``stepwise db upgrade``): a database without them is told so, not changed. The command
    signs no cookie, so a throwaway SECRET_KEY is fine where none is set."""
    app = make_app(
        database_url,
        SECRET_KEY=os.environ.get("SECRET_KEY") or secrets.token_hex(16),
        STEPWISE_BROKER_WARNING=False,
    )
    with app.app_context():
        if not inspect(db.engine).has_table(users.User.__tablename__):
            raise CommandFailed(
                "this database has no studio_users table yet: run `stepwise db upgrade` (or "
                "`stepwise serve`, which migrates first), then try again"
            )
        try:
            yield app
        finally:
            db.session.remove()
            db.engine.dispose()


def read_password(password_stdin: bool) -> str:
    if password_stdin:
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


@users_group.command("create")
@NAME
@click.option("--role", type=click.Choice(users.ROLES), default=users.VIEWER, show_default=True)
@PASSWORD_STDIN
@DATABASE_URL
def users_create(name: str, role: str, password_stdin: bool, database_url: str | None) -> int:
    """Add a user who may sign in to the studio.

    A viewer sees everything and changes nothing; an operator may also run commands
    (cancel, retry, approve, reject, forget)."""
    password = read_password(password_stdin)
    with studio_tables(database_url), user_errors():
        user = users.create(name, password, role)
        click.echo(f"Created {user.role} {user.name}")
    return 0


@users_group.command("list")
@DATABASE_URL
def users_list(database_url: str | None) -> int:
    """List the studio's users with their roles."""
    with studio_tables(database_url):
        everyone = users.everyone()
        if not everyone:
            click.echo("no users yet: add one with `stepwise users create NAME --role operator`")
        for user in everyone:
            last = user.last_login_at.strftime("%Y-%m-%d %H:%M") if user.last_login_at else "never"
            click.echo(f"{user.name:<24} {user.role:<9} last sign-in: {last}")
    return 0


@users_group.command("delete")
@NAME
@DATABASE_URL
def users_delete(name: str, database_url: str | None) -> int:
    """Remove a user: their open sessions end at their next request."""
    with studio_tables(database_url):
        db.session.delete(existing(name))
        db.session.commit()
        click.echo(f"Deleted {name}")
    return 0


@users_group.command("password")
@NAME
@PASSWORD_STDIN
@DATABASE_URL
def users_password(name: str, password_stdin: bool, database_url: str | None) -> int:
    """Set a user's password."""
    password = read_password(password_stdin)
    with studio_tables(database_url), user_errors():
        existing(name).set_password(password)
        db.session.commit()
        click.echo(f"Changed the password of {name}")
    return 0


@users_group.command("role")
@NAME
@click.argument("role", type=click.Choice(users.ROLES), metavar="ROLE")
@DATABASE_URL
def users_role(name: str, role: str, database_url: str | None) -> int:
    """Make a user a viewer, an operator or an admin (ROLE)."""
    with studio_tables(database_url), user_errors():
        users.set_role(existing(name), role)
        db.session.commit()
        click.echo(f"{name} is now {'an' if role[0] in 'aeiou' else 'a'} {role}")
    return 0


# --- serve --------------------------------------------------------------------------------------


@cli.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="the address to listen on")
@click.option("--port", type=int, default=5000, show_default=True, help="the port to listen on")
@click.option("--demo", is_flag=True, help="seed demo actors whose workflows keep running")
@click.option(
    "--import",
    "imports",
    multiple=True,
    metavar="MODULE",
    help="a module defining your actors (repeatable; also $STEPWISE_IMPORTS, comma-separated)",
)
@click.option("--threads", type=int, default=2, metavar="N", help="in-process worker threads (default: 2)")
@DATABASE_URL
def serve(
    host: str, port: int, demo: bool, imports: tuple[str, ...], threads: int, database_url: str | None
) -> int:
    """Run the studio on http://HOST:PORT, with the engine's migrations applied first.

    Without REDIS_URL or RABBITMQ_URL this is the embedded default: Dramatiq's in-memory
    broker, an in-process worker and a sweeper, in this one process. With a broker URL,
    the workers are separate processes (`stepwise worker`, the Procfile) and so is the
    sweeper. STEPWISE_ENV defaults to development here (plain-http cookies, a throwaway
    SECRET_KEY when none is set, and a first admin `admin` when there is no user);
    production serves the studio with gunicorn: `gunicorn 'app:create_app()'`.
    """
    env = os.environ.get("STEPWISE_ENV") or "development"
    check_port_free(host, port)
    modules = [os.environ.get("STEPWISE_IMPORTS", ""), *imports, *(["app.demo"] if demo else [])]
    app = make_app(database_url, STEPWISE_ENV=env, STEPWISE_IMPORTS=",".join(m for m in modules if m.strip()))
    embedded = not (app.config["REDIS_URL"] or app.config["RABBITMQ_URL"])
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per (polling) request

    with app.app_context():
        engine.upgrade()  # the engine's tables and the studio's
        if demo:
            create_demo_tables()
        first_user = create_first_user() if env == "development" else None
        existing_admin = first_admin() if env == "development" and first_user is None else None
        url = db.engine.url.render_as_string(hide_password=True)

    from .embedded import Embedded

    runtime = Embedded(worker_threads=threads) if embedded else None
    seeding = None
    if runtime is not None:
        runtime.start()
    if demo:
        from .demo.runner import Demo

        seeding = Demo()
        seeding.start()

    print(f"Stepwise studio on http://{host}:{port}/  ({env})", flush=True)
    print(f"  database: {url}", flush=True)
    if runtime is not None:
        print(
            f"  workers:  in this process ({threads} threads, in-memory broker), sweeping every "
            f"{runtime.sweep_every:g}s and firing schedules",
            flush=True,
        )
    else:
        print("  workers:  separate processes on the broker (stepwise worker; stepwise clock)", flush=True)
    if seeding is not None:
        print("  demo:     deployments, orders and reports start every few seconds", flush=True)
        if runtime is None:
            print("            (the workers need STEPWISE_IMPORTS=app.demo)", flush=True)
    if first_user is not None:
        name, password = first_user
        print(
            f"  sign in:  {name} / {password}  (shown once: change it with `stepwise users password {name}`)",
            flush=True,
        )
    elif existing_admin is not None:
        print(
            f"  sign in:  {existing_admin} (its password was shown at the first start; forgot it? "
            f"`.venv/bin/stepwise users password {existing_admin}` sets a new one)",
            flush=True,
        )
    print("Press Ctrl-C to stop.", flush=True)

    signal.signal(signal.SIGTERM, _interrupt)
    from werkzeug.serving import run_simple

    try:
        run_simple(host, port, app, threaded=True, use_reloader=False, use_debugger=False)
    except KeyboardInterrupt:
        pass
    finally:
        if seeding is not None:
            seeding.stop()
        if runtime is not None:
            runtime.stop()
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def create_demo_tables() -> None:
    """The demo's actors' tables (``demo_*``): throwaway examples, not the studio's schema,
    so no migration makes them; ``serve --demo`` does at its start."""
    from . import demo  # noqa: F401 - registers the demo's tables

    tables = [t for t in db.metadata.sorted_tables if t.name.startswith("demo_")]
    db.metadata.create_all(db.engine, tables=tables)


def create_first_user() -> tuple[str, str] | None:
    """On a fresh development database, an admin ``admin`` with a random password."""
    if users.any_exists():
        return None
    password = secrets.token_urlsafe(12)
    users.create("admin", password, users.ADMIN)
    return "admin", password


def first_admin() -> str | None:
    """The name of an admin who may sign in (``admin`` if there is one), for the reminder."""
    found = users.find("admin")
    if found is not None and not found.disabled:
        return found.name
    admins = [u for u in users.everyone() if u.role == users.ADMIN and not u.disabled]
    return admins[0].name if admins else None


def check_port_free(host: str, port: int) -> None:
    """Refuse to start (before anything is made) when the port is taken, naming a free one."""
    if port_free(host, port):
        return
    free = next((p for p in range(port + 1, port + 50) if port_free(host, p)), None)
    suggestion = f": try `--port {free}`, which is free" if free is not None else ""
    raise CommandFailed(
        f"port {port} on {host} is taken (another studio, or another program, listens there){suggestion}"
    )


def port_free(host: str, port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True
