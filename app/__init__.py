"""The operator studio (Flask + htmx), one package per area (``app/overview/``,
``app/action/``…, registered by ``app.areas``) beside the helpers they share. It reads the
engine's tables through each area's read model (``app.<area>.queries``, on the shared
helpers of ``app.queries``) and changes state only through the engine's public API
(``engine.commands``).

``create_app`` is the one place that reads the studio's environment: defaults first, then
the environment, then the caller's mapping (tests, ``stepwise serve``).
"""

from __future__ import annotations

import importlib
import logging
import os
import secrets
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from flask import Flask

import engine
from engine import db as engine_db
from engine.errors import ConfigurationError

from .database import db

log = logging.getLogger("stepwise.studio")

ROOT = Path(__file__).resolve().parent.parent

#: STEPWISE_ENV: "development" (stepwise serve, a throwaway key, plain-http cookies),
#: "testing", or "production" (the default: SECRET_KEY required, Secure cookies).
ENVIRONMENTS = ("development", "testing", "production")

DEFAULTS: dict[str, Any] = {
    "STEPWISE_ENV": "production",
    "DATABASE_URL": engine_db.DEFAULT_URL,
    "SECRET_KEY": None,
    #: The shared secret of the completion webhook's HMAC signatures.
    "STEPWISE_WEBHOOK_SECRET": None,
    "REDIS_URL": None,
    "RABBITMQ_URL": None,
    #: Modules defining your actors, comma-separated: imported at start so that commands
    #: run in the studio (approve, cancel…) can run the actions' callbacks.
    "STEPWISE_IMPORTS": "",
    "SESSION_COOKIE_NAME": "stepwise_session",
    "SESSION_COOKIE_HTTPONLY": True,
    "SESSION_COOKIE_SAMESITE": "Lax",
    "PERMANENT_SESSION_LIFETIME": timedelta(hours=12),
    "SQLALCHEMY_TRACK_MODIFICATIONS": False,
    #: werkzeug.security's method for new password hashes (tests use a cheap one).
    "PASSWORD_HASH_METHOD": "scrypt",
}

#: The settings the environment may give, by variable name.
ENVIRONMENT = (
    "STEPWISE_ENV",
    "DATABASE_URL",
    "SECRET_KEY",
    "STEPWISE_WEBHOOK_SECRET",
    "REDIS_URL",
    "RABBITMQ_URL",
    "STEPWISE_IMPORTS",
    "RATELIMIT_STORAGE_URI",
)


def create_app(test_config: Mapping[str, Any] | None = None) -> Flask:
    """The studio: ``gunicorn 'app:create_app()'`` in production, ``stepwise serve`` on a
    laptop. ``test_config`` overrides the defaults and the environment."""
    app = Flask(
        __name__,
        template_folder=str(ROOT / "templates"),
        static_folder=str(ROOT / "static"),
    )
    from .security import hardening as security

    app.config.from_mapping({**DEFAULTS, **security.DEFAULTS})
    app.config.from_mapping({k: os.environ[k] for k in ENVIRONMENT if os.environ.get(k)})
    if test_config is not None:
        app.config.from_mapping(test_config)
    if app.config.get("TESTING"):
        app.config["STEPWISE_ENV"] = "testing"
    check_environment(app)

    app.config["SQLALCHEMY_DATABASE_URI"] = database_uri(app.config["DATABASE_URL"])
    app.config.setdefault("SQLALCHEMY_ENGINE_OPTIONS", engine_options(app.config["SQLALCHEMY_DATABASE_URI"]))
    db.init_app(app)
    with app.app_context():
        # One database, one connection pool: the engine's jobs and commands run on the
        # studio's SQLAlchemy engine (on SQLite, configure() also sets its locking mode).
        engine.configure(db.engine)

    install_broker(app)
    import_modules(app.config["STEPWISE_IMPORTS"])

    from . import views
    from .areas import register_all
    from .security import auth, csrf

    security.init_app(app)
    auth.init_app(app)
    csrf.init_app(app)
    views.init_app(app)
    register_all(app)
    return app


def check_environment(app: Flask) -> None:
    env = app.config["STEPWISE_ENV"]
    if env not in ENVIRONMENTS:
        raise ConfigurationError(f"STEPWISE_ENV is {env!r}: use one of {', '.join(ENVIRONMENTS)}")
    if not app.config.get("SECRET_KEY"):
        if env == "production":
            raise ConfigurationError(
                "SECRET_KEY is not set: the studio signs its session cookies with it. Set it to a "
                "long random string that stays the same across restarts and processes, e.g. "
                "SECRET_KEY=$(python3 -c 'import secrets; print(secrets.token_hex(32))'); "
                "or set STEPWISE_ENV=development on your own machine to use a throwaway key"
            )
        # Development: sessions last as long as this process.
        app.config["SECRET_KEY"] = secrets.token_hex(32)
    # Outside development the studio is served over HTTPS (behind a proxy that terminates
    # TLS): the browser must never send the session cookie in clear.
    app.config["SESSION_COOKIE_SECURE"] = env == "production"


def database_uri(url: str) -> str:
    """The engine's spelling of the URL; a relative SQLite path is taken from the working
    directory, as the ``stepwise`` command does (Flask-SQLAlchemy would put it in
    ``instance/``, making two databases of one name)."""
    url = engine_db.normalize_url(url)
    prefix = "sqlite:///"
    if url.startswith(prefix):
        path = url[len(prefix) :]
        if path and path != ":memory:" and not path.startswith("file:") and not Path(path).is_absolute():
            return prefix + str(Path.cwd() / path)
    return url


def engine_options(uri: str) -> dict[str, Any]:
    """The pool options ``engine.configure`` would choose for the same URL."""
    if uri.startswith("sqlite"):
        return {"connect_args": {"timeout": 30}}
    if uri.startswith("postgresql"):
        return {"pool_pre_ping": True}
    return {}


def install_broker(app: Flask) -> None:
    """With REDIS_URL or RABBITMQ_URL, commands send the steps they make ready to the
    workers through that broker. Without one, the broker is left as it is: the embedded
    worker's (``stepwise serve``), a test's stub, or an in-memory one whose messages only
    the sweeper makes up for."""
    from engine import broker

    if app.config["REDIS_URL"]:
        from engine.redis_doorbell import DoorbellRedisBroker

        broker.use(DoorbellRedisBroker(url=app.config["REDIS_URL"]))
    elif app.config["RABBITMQ_URL"]:
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        broker.use(RabbitmqBroker(url=app.config["RABBITMQ_URL"]))
    else:
        broker.setup()  # keeps a broker already installed; else the in-memory one
        # Only where the studio serves: a `stepwise users` command sends no step anywhere.
        if app.config["STEPWISE_ENV"] == "production" and app.config.get("STEPWISE_BROKER_WARNING", True):
            log.warning(
                "no REDIS_URL or RABBITMQ_URL: steps made ready by the studio's commands reach "
                "the workers only through the sweeper (stepwise sweep)"
            )


def import_modules(names: str) -> None:
    for name in (n.strip() for n in names.split(",")):
        if name:
            importlib.import_module(name)
