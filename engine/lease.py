"""A step's lease: its row lock, read with its action's row.

A body runs holding its step's lease (``LEASE``: a step whose lease another worker holds is
skipped, not waited for; that worker runs it). Its outcome is recorded under the same lock
(``LOCK``: it waits only for a lease on the step), and a group-commit batch takes the
locks of all the steps it concludes at once, in id order (``LOCK_ALL``,
engine/batch_conclusion.py). Each reads the rows afresh (``populate_existing``): a
session's copy may be an earlier transaction's.

A worker often knows whose step it is about to run: the children a body starts, and the
next step of a tree, are mostly on the same actor as the body before. ``lease_with_actor``
takes the lease and reads that guessed actor's row in the same statement, so the body
starts without a query of its own; a wrong guess costs one row read, and the actor is read
as usual.

A worker takes a lease for nearly every action, each in a session of its own, so on
PostgreSQL ``take`` sends that statement through psycopg alone and makes the ORM objects
from its row itself (``_Reader``), as a query would have loaded them: a lease and its
rollback cost a thread ~570 µs of CPU so, ~700 µs through the ORM, against ~415 µs for the
statement through psycopg alone (bench/lease.py, medians). It reads through the
ORM where that shortcut would not load the objects the same way: on SQLite, in a session
that holds one of the rows already (a retried attempt), and for an actor class whose
loading does more than set its columns (eager relationships, inheritance, load events).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from sqlalchemy import ARRAY, BigInteger, bindparam, select
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.orm import Mapper, Session, make_transient_to_detached

from .action import Action
from .step import Step


def _locked(skip_locked: bool) -> Any:
    return (
        select(Step, Action)
        .join(Action, Action.id == Step.action_id)
        .with_for_update(of=Step, skip_locked=skip_locked)
        .execution_options(populate_existing=True)
    )


#: The step ``step_id`` with its action, its lease taken unless another holds it.
LEASE = _locked(skip_locked=True).where(Step.id == bindparam("step_id"))
#: The step ``step_id`` with its action, waiting for its lease if another holds it.
LOCK = _locked(skip_locked=False).where(Step.id == bindparam("step_id"))
#: PostgreSQL: the steps ``ids`` with their actions, locked in id order.
LOCK_ALL = (
    _locked(skip_locked=False)
    .where(Step.id == bindparam("ids", type_=ARRAY(BigInteger)).any_())
    .order_by(Step.id)
)


@cache
def lease_with_actor(cls: type) -> Any:
    """``LEASE`` that also reads the row of ``cls`` whose primary key is ``actor_key`` (None
    when there is none): (step, action, actor)."""
    key: Any = sa_inspect(cls).primary_key[0]
    return LEASE.add_columns(cls).outerjoin(cls, key == bindparam("actor_key", type_=key.type))


def take(session: Session, step_id: int, actor_class: type | None = None, actor_key: Any = None) -> Any:
    """The lease of step ``step_id`` taken in ``session``: ``(step, action, actor)``, the
    actor being the row of ``actor_class`` keyed ``actor_key`` (None when no class is given
    or no such row exists); None when another holds the lease or the step is gone."""
    connection = session.connection()
    if connection.dialect.name == "postgresql" and (actor_class is None or _plain(actor_class)):
        reader = _reader(connection.dialect, actor_class)
        row = reader.read(connection, {"step_id": step_id, "actor_key": actor_key})
        if row is None:
            return None
        objects = reader.objects(session, row)
        if objects is not None:
            return (*objects, None) if actor_class is None else objects
    if actor_class is None:
        row = session.execute(LEASE, {"step_id": step_id}).one_or_none()
        return None if row is None else (*row, None)
    parameters = {"step_id": step_id, "actor_key": actor_key}
    # unique(): the actor's class may load a collection with a join (lazy="joined")
    return session.execute(lease_with_actor(actor_class), parameters).unique().one_or_none()


#: Relationship loaders that read nothing when the object is loaded.
_LAZY = frozenset({"select", "noload", "raise", "raise_on_sql", "dynamic", "write_only"})


@cache
def _plain(cls: type) -> bool:
    """Whether loading a row of ``cls`` does nothing but set its columns (``_Reader`` does
    just that): one table, no eager relationships, no load or refresh events."""
    mapper: Any = sa_inspect(cls, False)
    if mapper is None or mapper.inherits is not None or mapper.polymorphic_on is not None:
        return False
    dispatch = mapper.class_manager.dispatch
    if dispatch.load or dispatch.refresh:
        return False
    columns = [prop.columns for prop in mapper.column_attrs]
    if any(len(group) != 1 or group[0].table is not mapper.local_table for group in columns):
        return False
    return all(relationship.lazy in _LAZY for relationship in mapper.relationships)


class _Reader:
    """``LEASE`` (with the row of an actor class, if given) as one statement sent through
    psycopg, and the persistent ORM objects made from its row."""

    def __init__(self, dialect: Dialect, actor_class: type | None) -> None:
        self.mappers: list[Mapper[Any]] = [sa_inspect(Step), sa_inspect(Action)]
        statement: Any = select(*_columns(self.mappers[0]), *_columns(self.mappers[1]))
        statement = statement.join_from(Step, Action, Action.id == Step.action_id)
        if actor_class is not None:
            actor: Mapper[Any] = sa_inspect(actor_class)
            key: Any = actor.primary_key[0]
            self.mappers.append(actor)
            statement = statement.add_columns(*_columns(actor)).outerjoin(
                actor_class, key == bindparam("actor_key", type_=key.type)
            )
        statement = statement.where(Step.id == bindparam("step_id")).with_for_update(
            of=Step, skip_locked=True
        )
        compiled = statement.compile(dialect=dialect)
        self.sql = compiled.string
        self.binds: dict[str, Callable[[Any], Any] | None] = {
            name: compiled.binds[name].type._cached_bind_processor(dialect) for name in compiled.binds
        }
        self.types = [column.type for mapper in self.mappers for column in _columns(mapper)]
        self.keys = [[prop.key for prop in mapper.column_attrs] for mapper in self.mappers]
        #: Each column's result processor, from the types psycopg reports (first read).
        self.processors: list[Callable[[Any], Any] | None] | None = None

    def read(self, connection: Connection, parameters: dict[str, Any]) -> Sequence[Any] | None:
        """The row, the lease taken (None when it is not)."""
        values = {
            name: value if process is None or value is None else process(value)
            for name, value in parameters.items()
            if name in self.binds
            for process in (self.binds[name],)
        }
        # Listeners see the statement as any other (statement counts, write counts).
        connection.dispatch.before_cursor_execute(connection, None, self.sql, values, None, False)
        cursor = connection.connection.driver_connection.execute(self.sql, values)  # type: ignore[union-attr]
        row = cursor.fetchone()
        connection.dispatch.after_cursor_execute(connection, cursor, self.sql, values, None, False)
        if row is None:
            return None
        processors = self.processors
        if processors is None:  # the same for every thread that computes them
            processors = self.processors = [
                type_._cached_result_processor(connection.dialect, column.type_code)
                for type_, column in zip(self.types, cursor.description or (), strict=True)
            ]
        pairs = zip(row, processors, strict=True)
        return [value if process is None else process(value) for value, process in pairs]

    def objects(self, session: Session, row: Sequence[Any]) -> list[Any] | None:
        """The row's objects, persistent in ``session`` as a query would have loaded them
        (the actor None when its columns are all NULL: no such row); None when
        ``session`` holds one of them already (then ``LEASE`` reads them afresh)."""
        made: list[Any] = []
        start = 0
        for mapper, keys in zip(self.mappers, self.keys, strict=True):
            values = row[start : start + len(keys)]
            start += len(keys)
            if all(value is None for value in values):
                made.append(None)
                continue
            instance = mapper.class_manager.new_instance()
            instance.__dict__.update(zip(keys, values, strict=True))
            make_transient_to_detached(instance)
            if sa_inspect(instance).key in session.identity_map:
                return None
            made.append(instance)
        for instance in made:
            if instance is not None:
                session.add(instance)
        return made


def _columns(mapper: Mapper[Any]) -> list[Any]:
    return [prop.columns[0] for prop in mapper.column_attrs]


@cache
def _reader(dialect: Dialect, actor_class: type | None) -> _Reader:
    return _Reader(dialect, actor_class)
