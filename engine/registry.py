"""The registry: definitions by (actor class, action name), and actor classes and service
objects by the type name stored on action rows.

``find`` walks the class's MRO, so subclasses inherit their parents' definitions
(``definition.find_or_add`` turns any undeclared method into a one-step action).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache, partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import ARRAY, bindparam, select
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import NoInspectionAvailable
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import instance_state
from sqlalchemy.orm.base import DEFAULT_STATE_ATTR

from . import rows
from .errors import ActorNotFound, ActorTypeTaken, NotAnActor

if TYPE_CHECKING:
    from .definition import Definition

_definitions: dict[tuple[type, str], Definition] = {}
_actor_classes: dict[str, type] = {}
_services: dict[tuple[str, str], object] = {}
_jobs: list[Any] = []


def type_name(cls: type) -> str:
    """The name stored in ``actor_type``: the class's own ``__actor_type__`` (not one it
    inherits: a subclass is another actor type), or else the class name."""
    return str(cls.__dict__.get("__actor_type__") or cls.__name__)


def add_actor_class(cls: type) -> None:
    """Register ``cls`` under its actor type. The same class again is no change; a class of
    the same module and qualified name replaces it (a reloaded module's new class); any
    other class is refused, naming both: their stored rows would be mixed up."""
    name = type_name(cls)
    known = _actor_classes.get(name)
    if known is None or known is cls or _where(known) == _where(cls):
        _actor_classes[name] = cls
        return
    raise ActorTypeTaken(
        f"actor type {name!r} is already {'.'.join(_where(known))}, so {'.'.join(_where(cls))} "
        f"cannot be registered under it: give one of them its own type, e.g. "
        f"__actor_type__ = {_suggested(cls)!r} in its "
        f"class body (actions already stored keep the type they were stored with)"
    )


def _where(cls: type) -> tuple[str, str]:
    return cls.__module__, cls.__qualname__


def _suggested(cls: type) -> str:
    """``ChaosWorkloadOrder`` for ``tests.integration.chaos_workload.Order``."""
    module = cls.__module__.rsplit(".", 1)[-1]
    return "".join(part[:1].upper() + part[1:] for part in module.split("_")) + cls.__name__


def add(definition: Definition) -> Definition:
    """Register ``definition``, replacing any earlier one for the same class and name."""
    add_actor_class(definition.actor_class)
    _definitions[(definition.actor_class, definition.name)] = definition
    if definition.job is not None and definition.job not in _jobs:
        _jobs.append(definition.job)
    return definition


def remove(cls: type, name: str) -> None:
    _definitions.pop((cls, name), None)


def find(cls: type, name: str) -> Definition | None:
    for klass in cls.__mro__:
        found = _definitions.get((klass, name))
        if found is not None:
            return found
    return None


def job_classes() -> list[Any]:
    """Every Dramatiq job used with ``job=`` in a definition."""
    return list(_jobs)


def definitions() -> list[Definition]:
    """Every registered definition, in the order they were registered (the studio's catalog)."""
    return list(_definitions.values())


def actor_classes() -> dict[str, type]:
    """The actor classes known to this process, by the type name stored on action rows."""
    return dict(_actor_classes)


# --- actors -----------------------------------------------------------------------------


def register_service(obj: object, id: str = "default") -> object:
    """Make a plain object an actor: actions on it are stored as (its class name, ``id``)."""
    cls = type(obj)
    add_actor_class(cls)
    _services[(type_name(cls), id)] = obj
    obj.__dict__["__stepwise_id__"] = id
    return obj


def actor_ref(actor: object) -> tuple[str, str]:
    """(actor_type, actor_id) of a persisted SQLAlchemy row or a registered service object."""
    cls = type(actor)
    service_id = getattr(actor, "__dict__", {}).get("__stepwise_id__")
    if service_id is not None:
        return type_name(cls), str(service_id)
    try:
        # A mapped row's state where it keeps it, else what inspect finds (or refuses).
        state = getattr(actor, DEFAULT_STATE_ATTR, None) or sa_inspect(actor)
    except NoInspectionAvailable:
        raise NotAnActor(
            f"{cls.__name__} is not an actor: use a SQLAlchemy model row, or register the "
            f"object with engine.register_service(obj, id=...)"
        ) from None
    identity = getattr(state, "identity", None)
    if identity is None:
        raise NotAnActor(
            f"{cls.__name__} has no primary key yet: add it to a session and flush before "
            f"invoking an action on it"
        )
    if len(identity) != 1:
        raise NotAnActor(f"{cls.__name__} has a composite primary key, which actors cannot use")
    add_actor_class(cls)
    return type_name(cls), str(identity[0])


def actor_class(actor_type: str) -> type:
    cls = _actor_classes.get(actor_type)
    if cls is None:
        raise ActorNotFound(
            f"no actor class named {actor_type!r} is registered in this process: import the "
            f"module that defines it (workers: dramatiq engine.jobs yourapp.models; the stepwise "
            f"command: --import yourapp.models or STEPWISE_IMPORTS)"
        )
    return cls


def load_actor(session: Session, actor_type: str, actor_id: str, *, fresh: bool = False) -> object:
    """The actor a stored reference names: a service object, or the row in ``session``
    (read again from the database when ``fresh``, else the copy the session may hold)."""
    service = _services.get((actor_type, actor_id))
    if service is not None:
        return service
    cls = actor_class(actor_type)
    key = _primary_key(cls, actor_id)
    if not fresh:
        held = _held(session, cls, key)
        if held is not None:
            return held
    row = session.get(cls, key, populate_existing=fresh)
    if row is None:
        raise ActorNotFound(f"{actor_type}/{actor_id} no longer exists")
    return row


def _held(session: Session, cls: type, key: Any) -> object | None:
    """The row of ``cls`` with primary key ``key`` that ``session`` holds loaded, as
    ``Session.get`` finds it first (~10 µs less: admission reads each candidate's actor
    so, after ``load_actors`` read them all); None when it holds none, or must load it."""
    mapper = mapper_of(cls)
    if mapper is None or mapper.inherits is not None:
        return None
    held = session.identity_map.get(mapper.identity_key_from_primary_key((key,)))
    return None if held is None or instance_state(held).expired else held


def mapped_key(actor_type: str, actor_id: str) -> tuple[type, Any] | None:
    """The mapped class and primary key a stored reference reads its row with; None for a
    service object, a class this process does not know or that is not mapped, or an id
    that is not a key of that class."""
    cls = _actor_classes.get(actor_type)
    if cls is None or (actor_type, actor_id) in _services or mapper_of(cls) is None:
        return None
    try:
        return cls, _key(cls, actor_id)
    except (ValueError, TypeError):
        return None


def load_actors(session: Session, references: Sequence[tuple[str, str]]) -> list[object]:
    """The rows of many actors (``(actor_type, actor_id)``), read with one statement per
    class into ``session``, where ``load_actor`` then finds them without a query while
    the caller holds the list. Services and unknown classes are left to ``load_actor``.
    On PostgreSQL the rows of a plain class are read through psycopg alone
    (engine/rows.py)."""
    wanted: dict[type, set[Any]] = {}
    for actor_type, actor_id in references:
        mapped = mapped_key(actor_type, actor_id)
        if mapped is not None:
            wanted.setdefault(mapped[0], set()).add(mapped[1])
    found: list[object] = []
    for cls, keys in wanted.items():
        ordered = sorted(keys, key=str)
        if rows.plain(cls):
            made = rows.read(session, partial(_actors_reader, cls=cls), {"keys": ordered})
            if made is not None:
                found.extend(row[0] for row in made)
                continue
        column: Any = sa_inspect(cls).primary_key[0]
        # unique(): the class may load a collection with a join (lazy="joined")
        found.extend(session.scalars(select(cls).where(column.in_(ordered))).unique())
    return found


@cache
def _actors_reader(dialect: Dialect, cls: type) -> rows.Reader:
    """The rows of ``cls`` whose primary keys are among ``keys``."""
    column: Any = sa_inspect(cls).primary_key[0]
    statement = select(*rows.columns(cls)).where(column == bindparam("keys", type_=ARRAY(column.type)).any_())
    return rows.Reader(statement, dialect, [cls])


def _primary_key(cls: type, actor_id: str) -> Any:
    """The primary key value an actor id (always stored as text) stands for."""
    try:
        return _key(cls, actor_id)
    except (ValueError, TypeError):
        return actor_id


def _key(cls: type, actor_id: str) -> Any:
    """``actor_id`` as a value of the class's primary key (ValueError when it is none)."""
    python_type = _key_type(cls)
    return actor_id if python_type is None else python_type(actor_id)


@cache
def mapper_of(cls: type) -> Any:
    """The mapper of an actor class, None for a class that is not mapped (a service's):
    looked up once per class, where ``sqlalchemy.inspect`` took ~2 µs a call and the
    engine asks for each action it admits, claims or concludes."""
    return sa_inspect(cls, False)


@cache
def _key_type(cls: type) -> type | None:
    """The Python type of the class's primary key, None when its column type has none."""
    column: Any = sa_inspect(cls).primary_key[0]
    try:
        return column.type.python_type  # type: ignore[no-any-return]
    except NotImplementedError:
        return None


def snapshot() -> tuple[dict[tuple[type, str], Definition], list[Any]]:
    """The registry's definitions, to ``restore`` later (tests redefine actions freely)."""
    return dict(_definitions), list(_jobs)


def restore(state: tuple[dict[tuple[type, str], Definition], list[Any]]) -> None:
    _definitions.clear()
    _definitions.update(state[0])
    _jobs[:] = state[1]
