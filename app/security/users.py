"""Users of the studio: a name, a hashed password, a role, and the generation of their
sessions.

A ``viewer`` sees everything and changes nothing; an ``operator`` may also run commands; an
``admin`` may also manage people (the People page, or ``stepwise users`` on the command line).
A disabled user cannot sign in, and their open sessions end at their next request.

A session cookie carries the user's ``session_generation`` at sign-in: signing out or changing
the password moves it on, so every other cookie of that user stops working (the cookie is
signed, not stored: the generation is what revokes it). The table is made by the
migrations (``stepwise db upgrade``, ``stepwise serve``).
"""

from __future__ import annotations

import re
from datetime import datetime

from flask import current_app, has_app_context
from sqlalchemy import String, select
from sqlalchemy.orm import Mapped, mapped_column
from werkzeug.security import check_password_hash, generate_password_hash

from engine import clock

from ..database import db

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"
#: Each role may do what the roles before it may.
ROLES: tuple[str, ...] = (VIEWER, OPERATOR, ADMIN)
#: What each role may do, in the words of the People page and the role badge.
ROLE_MEANINGS = {
    VIEWER: "sees everything, changes nothing",
    OPERATOR: "may also run commands",
    ADMIN: "may also manage people",
}

NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,80}$")
MIN_PASSWORD = 8
MAX_PASSWORD = 1024

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
    #: Set when an admin disables the user: no sign-in, no session.
    disabled_at: Mapped[datetime | None]
    #: Moved on by signing out and by a new password: older session cookies stop working.
    session_generation: Mapped[int] = mapped_column(default=0, server_default="0")

    def __repr__(self) -> str:
        return f"<User {self.name} {self.role}{' disabled' if self.disabled_at else ''}>"

    @property
    def disabled(self) -> bool:
        return self.disabled_at is not None

    def end_sessions(self) -> None:
        """End every session of this user (the caller commits)."""
        self.session_generation += 1

    def can(self, role: str) -> bool:
        """Whether this user has ``role`` or a role above it."""
        return ROLES.index(self.role) >= ROLES.index(role)

    def set_password(self, password: str) -> None:
        if len(password) < MIN_PASSWORD:
            raise UserError(f"the password is too short: use at least {MIN_PASSWORD} characters")
        if len(password) > MAX_PASSWORD:
            raise UserError(f"the password is too long: use at most {MAX_PASSWORD} characters")
        method = current_app.config["PASSWORD_HASH_METHOD"] if has_app_context() else "scrypt"
        self.password_hash = generate_password_hash(password, method=method)
        if self.id is not None:
            self.end_sessions()

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


def set_role(user: User, role: str) -> None:
    check_role(role)
    if user.role == ADMIN and role != ADMIN and _last_admin(user):
        raise UserError(f"{user.name} is the last admin: make another user an admin first")
    user.role = role


def set_disabled(user: User, disabled: bool) -> None:
    """Disable a user (their sessions end) or enable them again (the caller commits)."""
    if disabled and user.disabled_at is None:
        if user.role == ADMIN and _last_admin(user):
            raise UserError(f"{user.name} is the last admin: make another user an admin first")
        user.disabled_at = clock.now()
        user.end_sessions()
    elif not disabled:
        user.disabled_at = None


def _last_admin(user: User) -> bool:
    others = select(User.id).where(User.role == ADMIN, User.disabled_at.is_(None), User.id != user.id)
    return db.session.scalar(others.limit(1)) is None


def commit() -> None:
    db.session.commit()


def check_role(role: str) -> None:
    if role not in ROLES:
        raise UserError(f"{role!r} is not a role: use one of {', '.join(ROLES)}")


def authenticate(name: str, password: str) -> User | None:
    """The user with this name and password, else None (the two failures look alike). A
    disabled user is returned too: the caller refuses them, saying so."""
    user = find(name) if NAME.match(name) else None
    if user is None or len(password) > MAX_PASSWORD:
        check_password_hash(_DUMMY_HASH, password[:MAX_PASSWORD])
        return None
    if not user.check_password(password):
        return None
    if user.disabled:
        return user
    user.last_login_at = clock.now()
    db.session.commit()
    return user
