"""Users of the studio: a name, a hashed password and a role.

A ``viewer`` sees everything and changes nothing; an ``operator`` may also run commands.
Users are created on the command line (``stepwise users create``), never in the browser;
their table is made by ``stepwise serve`` and ``stepwise users`` (``db.create_all()``).
"""

from __future__ import annotations

import re
from datetime import datetime

from flask import current_app, has_app_context
from sqlalchemy import String, select
from sqlalchemy.orm import Mapped, mapped_column
from werkzeug.security import check_password_hash, generate_password_hash

from engine import clock

from .database import db

VIEWER = "viewer"
OPERATOR = "operator"
#: Each role may do what the roles before it may.
ROLES: tuple[str, ...] = (VIEWER, OPERATOR)

NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,80}$")
MIN_PASSWORD = 8

# Checked when the name is unknown, so that a wrong name costs as long as a wrong password.
_DUMMY_HASH = generate_password_hash("stepwise: no such user")


class UserError(ValueError):
    """Raised when a user cannot be created or changed; the message says what to change."""


class User(db.Model):
    __tablename__ = "studio_users"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(80), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(20), default=VIEWER)
    created_at: Mapped[datetime] = mapped_column(default=clock.now)
    last_login_at: Mapped[datetime | None]

    def __repr__(self) -> str:
        return f"<User {self.name} {self.role}>"

    def can(self, role: str) -> bool:
        """Whether this user has ``role`` or a role above it."""
        return ROLES.index(self.role) >= ROLES.index(role)

    def set_password(self, password: str) -> None:
        if len(password) < MIN_PASSWORD:
            raise UserError(f"the password is too short: use at least {MIN_PASSWORD} characters")
        method = current_app.config["PASSWORD_HASH_METHOD"] if has_app_context() else "scrypt"
        self.password_hash = generate_password_hash(password, method=method)

    def check_password(self, password: str) -> bool:
        return check_password_hash(self.password_hash, password)


def find(name: str) -> User | None:
    return db.session.scalar(select(User).where(User.name == name))


def get(user_id: int) -> User | None:
    return db.session.get(User, user_id)


def everyone() -> list[User]:
    return list(db.session.scalars(select(User).order_by(User.name)))


def any_exists() -> bool:
    return db.session.scalar(select(User.id).limit(1)) is not None


def create(name: str, password: str, role: str = VIEWER) -> User:
    """Create and commit a user."""
    if not NAME.match(name):
        raise UserError(
            f"{name!r} is not a valid user name: use 1 to 80 letters, digits, dots, dashes, underscores or @"
        )
    check_role(role)
    if find(name) is not None:
        raise UserError(f"there is already a user named {name!r}")
    user = User(name=name, role=role)
    user.set_password(password)
    db.session.add(user)
    db.session.commit()
    return user


def check_role(role: str) -> None:
    if role not in ROLES:
        raise UserError(f"{role!r} is not a role: use one of {', '.join(ROLES)}")


def authenticate(name: str, password: str) -> User | None:
    """The user with this name and password, else None (the two failures look alike)."""
    user = find(name)
    if user is None:
        check_password_hash(_DUMMY_HASH, password)
        return None
    if not user.check_password(password):
        return None
    user.last_login_at = clock.now()
    db.session.commit()
    return user
