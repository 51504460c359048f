"""Rows read through psycopg alone and made into ORM objects as a query would load them.

The reads a worker makes for nearly every action (a step's lease; in a batch, the
invocations it admits with their parents' actions, the actors they are on, the steps it
concludes with their actions, the actions of the parents that move on, the lanes it
locks, the waiting steps it decrements) cost far more CPU through the ORM than through the
driver: SQLAlchemy's execution, result and loading layers around a short statement. On
PostgreSQL a ``Reader`` sends such a statement through psycopg itself and makes the
objects from each row as loading would: a new instance, its columns set, its identity
given, persistent and unchanged in the session, its relationships loaded on access as
usual. A lease cost a thread ~570 µs of
CPU so against ~700 µs through the ORM (``bench/lease.py``). Values selected after the
classes' columns come with the objects.

That is only the same as loading for a class whose loading does nothing but set its
columns (``plain``: one table, no eager relationships, no load events). For a row the
session holds already, ``read(..., refresh=True)`` refreshes the object in place, each
column's value set as committed, as ``populate_existing`` does: what a locking read (its
ORM form carries ``populate_existing``) and a statement that writes (it cannot be sent
twice) ask for. Without ``refresh``, ``read`` then returns None and the caller reads
through the ORM, which keeps the objects the session has.

The session is flushed first when it autoflushes (unless the statement's ``autoflush``
option is False), as a query would. Listeners of the engine's ``before_cursor_execute``/
``after_cursor_execute`` events see the statement and its cursor (statement counts, write
counts), with no execution context. A driver error goes through SQLAlchemy's own
handling: it is raised as a ``DBAPIError``, and a lost connection is invalidated, so
``db.retrying`` runs the transaction again as it would for any statement. Only psycopg 3
connections are read so (``usable``); others use the ORM. Whether a class is plain is
decided once per process: classes are configured at import.

Two more shortcuts of the same kind, on any database: ``set_committed`` marks what the
engine's own statements wrote as loaded, and ``transient`` makes a new object with no
attribute events, as the engine makes candidate actions and child invocations.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from typing import Any, TypeVar, cast

from sqlalchemy import ARRAY, Column, bindparam, select
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.orm import Mapper, Session
from sqlalchemy.orm.attributes import instance_state, manager_of_class
from sqlalchemy.sql import Select
from sqlalchemy.sql.dml import UpdateBase

T = TypeVar("T")

#: Relationship loaders that read nothing when the object is loaded.
_LAZY = frozenset({"select", "noload", "raise", "raise_on_sql", "dynamic", "write_only"})


def usable(connection: Connection) -> bool:
    """Whether ``connection`` is one a ``Reader`` reads through: psycopg 3 on PostgreSQL."""
    return connection.dialect.driver == "psycopg"


def read(
    session: Session,
    reader: Callable[[Dialect], Reader],
    parameters: dict[str, Any],
    *,
    refresh: bool = False,
) -> list[list[Any]] | None:
    """The objects of each row of ``reader(dialect)``'s statement, read in ``session``;
    None when the ORM must read them instead (not a psycopg connection, or the session
    holds one of the rows already). With ``refresh`` (a locking read, or a statement that
    writes, which must not run twice) objects the session holds are refreshed in place
    instead."""
    connection = session.connection()
    if not usable(connection):
        return None
    found = reader(connection.dialect)
    return found.objects(session, found.rows(session, connection, parameters), refresh=refresh)


def by_ids(session: Session, cls: type, ids: Sequence[Any], *, refresh: bool = False) -> list[Any]:
    """The rows of ``cls`` (plain, with a one-column primary key) whose keys are ``ids``,
    in ``session``: read through psycopg where it can (``read``), else through the ORM as a
    query would (with ``refresh``, the objects the session holds refreshed either way)."""
    found = read(session, _by_ids_reader(cls), {"ids": list(ids)}, refresh=refresh)
    if found is not None:
        return [row[0] for row in found]
    key: Any = sa_inspect(cls).primary_key[0]
    statement: Any = select(cls).where(key.in_(ids))
    if refresh:
        statement = statement.execution_options(populate_existing=True)
    return list(session.scalars(statement))


@cache
def _by_ids_reader(cls: type) -> Callable[[Dialect], Reader]:
    @cache
    def reader(dialect: Dialect) -> Reader:
        key: Any = sa_inspect(cls).primary_key[0]
        statement = select(*columns(cls)).where(key == bindparam("ids", type_=ARRAY(key.type)).any_())
        return Reader(statement, dialect, [cls])

    return reader


@cache
def plain(cls: type) -> bool:
    """Whether loading a row of ``cls`` does nothing but set its columns: one table, every
    column a table column loaded with the row (no expression, no deferred column), no
    eager relationships, no load or refresh events."""
    mapper: Any = sa_inspect(cls, False)
    if mapper is None or mapper.inherits is not None or mapper.polymorphic_on is not None:
        return False
    dispatch = mapper.class_manager.dispatch
    if dispatch.load or dispatch.refresh:
        return False
    for prop in mapper.column_attrs:
        group = prop.columns
        if prop.deferred or len(group) != 1 or not isinstance(group[0], Column):
            return False
        if group[0].table is not mapper.local_table:
            return False
    return all(relationship.lazy in _LAZY for relationship in mapper.relationships)


def columns(cls: type) -> list[Any]:
    """Every mapped column of ``cls``, in the order ``Reader`` makes its objects from."""
    mapper: Any = sa_inspect(cls)
    return [prop.columns[0] for prop in mapper.column_attrs]


class Reader:
    """A statement selecting (or an UPDATE returning) ``columns(cls)`` of each class in
    ``classes``, in that order (of plain classes), then any other values, compiled once
    for ``dialect`` and sent through psycopg."""

    def __init__(
        self, statement: Select[Any] | UpdateBase, dialect: Dialect, classes: Sequence[type]
    ) -> None:
        if not all(plain(cls) for cls in classes):
            raise ValueError(f"loading a row of one of {classes} does more than set its columns")
        compiled = statement.compile(dialect=dialect)
        self.sql = compiled.string
        self.binds: dict[str, Callable[[Any], Any] | None] = {
            name: bind.type._cached_bind_processor(dialect) for name, bind in compiled.binds.items()
        }
        #: The values the statement itself holds (``where(x == 5)``), sent unless given.
        self.values = {name: bind.value for name, bind in compiled.binds.items() if not bind.required}
        self.mappers: list[Mapper[Any]] = [sa_inspect(cls) for cls in classes]
        self.keys = [[prop.key for prop in mapper.column_attrs] for mapper in self.mappers]
        #: Where each class's primary key columns are among its columns.
        self.identities = [_identity_of(mapper) for mapper in self.mappers]
        selected = statement.selected_columns if isinstance(statement, Select) else statement.exported_columns
        self.types = [column.type for column in selected]
        #: Whether the session is flushed first, as a query would (``autoflush`` option).
        self.autoflush = statement.get_execution_options().get("autoflush", True)
        #: Each column's result processor, from the types psycopg reports (first read).
        self.processors: list[Callable[[Any], Any] | None] | None = None

    def rows(self, session: Session, connection: Connection, parameters: dict[str, Any]) -> list[list[Any]]:
        """The statement's rows on ``connection``, ``session``'s, each value as SQLAlchemy
        would have returned it."""
        if self.autoflush and session.autoflush:
            session.flush()  # as a query would: nothing when the session holds no change
        binds = self.binds
        values = {
            name: _processed(binds[name], value)
            for name, value in {**self.values, **parameters}.items()
            if name in binds
        }
        cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            connection.dispatch.before_cursor_execute(connection, cursor, self.sql, values, None, False)
            cursor.execute(self.sql, values)
            found = cursor.fetchall()
            connection.dispatch.after_cursor_execute(connection, cursor, self.sql, values, None, False)
        except connection.dialect.loaded_dbapi.Error as error:
            # As SQLAlchemy handles any statement's: a DBAPIError, a lost connection invalidated.
            connection._handle_dbapi_exception(error, self.sql, values, cursor, None)
        processors = self.processors
        if processors is None:  # the same for every thread that computes them
            processors = self.processors = [
                type_._cached_result_processor(connection.dialect, column.type_code)
                for type_, column in zip(self.types, cursor.description or (), strict=True)
            ]
        if not any(processors):
            return [list(row) for row in found]
        return [
            [_processed(process, value) for value, process in zip(row, processors, strict=True)]
            for row in found
        ]

    def objects(
        self, session: Session, rows: Sequence[Sequence[Any]], refresh: bool = False
    ) -> list[list[Any]] | None:
        """The objects of each row (one per class; None for a class whose primary key is
        NULL, an outer join that found nothing), persistent in ``session``, then the row's
        other values; None when ``session`` holds one of them already (then read them
        through the ORM), unless ``refresh``: then that object is refreshed in place, as
        ``populate_existing`` does."""
        made: list[list[Any]] = []
        seen: dict[Any, Any] = {}  # one instance for a row that two rows name
        new: list[tuple[Any, Any]] = []  # attached once every row is read (or none, if one is held)
        identity_map = session.identity_map
        for row in rows:
            start = 0
            objects: list[Any] = []
            for mapper, keys, identity_of in zip(self.mappers, self.keys, self.identities, strict=True):
                values = row[start : start + len(keys)]
                start += len(keys)
                identity = identity_of(values)
                if identity is None:  # an outer join that found nothing
                    objects.append(None)
                    continue
                instance = seen.get(identity)
                if instance is None:
                    held = identity_map.get(identity)
                    if held is not None:
                        if not refresh:
                            return None
                        set_committed(held, dict(zip(keys, values, strict=True)))
                        instance = held
                    else:
                        instance = transient(mapper.class_, zip(keys, values, strict=True))
                        new.append((instance, identity))
                    seen[identity] = instance
                objects.append(instance)
            objects.extend(row[start:])
            made.append(objects)
        for instance, identity in new:
            persist(session, instance, identity)
        return made


def transient(cls: type[T], values: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> T:
    """A new object of ``cls`` holding ``values`` (column attributes by key), as its
    constructor makes one but with no attribute events: the values are put in its
    ``__dict__``, whence a flush inserts them as it would the constructor's (an INSERT
    reads the object's values, not their history). ~1 µs a column less: the engine makes
    an action and an invocation so for each child a step starts (the constructors were
    1.3% of a worker's py-spy samples); ``Reader`` and ``copies`` make their objects so
    before making them persistent (``persist``)."""
    instance: T = _manager(cast(Any, cls)).new_instance()
    instance.__dict__.update(values)
    return instance


@cache
def _manager(cls: Any) -> Any:
    """The class's instrumentation manager (looked up once: ~0.3 µs a call)."""
    return manager_of_class(cls)


def set_committed(instance: Any, values: Mapping[str, Any]) -> None:
    """Set column attributes of ``instance`` as loaded, with no history events: what
    SQLAlchemy's ``set_committed_value`` does for each key (the value put in the object's
    ``__dict__``, the key's pending change and expiry cleared), in one call for them all.
    Per key, it looked the attribute up and cleared its state in turn: ~4% of a worker's
    samples under py-spy, where the engine marks what its own statements wrote (a step's
    conclusion writes six columns, a refreshed lane or action all of them). Scalar
    (column) attributes only."""
    state = instance_state(instance)
    state.dict.update(values)
    state._commit(state.dict, values.keys())


def copies(session: Session, instances: Sequence[Any]) -> list[Any]:
    """Copies of ``instances`` (objects of plain classes, loaded in another session, each
    column's value held; None stays None) persistent and unchanged in ``session``, which
    holds none of their rows: that session's own objects, made with no statement."""
    made: list[Any] = []
    for instance in instances:
        if instance is None:
            made.append(None)
            continue
        state = instance_state(instance)
        mapper = state.mapper
        copy = transient(mapper.class_, zip(_keys(mapper), _values(mapper)(state.dict), strict=True))
        persist(session, copy, state.key)
        made.append(copy)
    return made


def loaded(instance: Any) -> bool:
    """Whether every column of ``instance`` holds its value (``copies`` can copy it)."""
    state = instance_state(instance)
    return state.dict.keys() >= _key_set(state.mapper)


@cache
def _keys(mapper: Mapper[Any]) -> list[str]:
    return [prop.key for prop in mapper.column_attrs]


@cache
def _key_set(mapper: Mapper[Any]) -> frozenset[str]:
    return frozenset(_keys(mapper))


@cache
def _values(mapper: Mapper[Any]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """A function from an object's ``__dict__`` to the values of its columns, in
    ``_keys`` order (in C: the copies of a batch's claims are made for every step run)."""
    keys = _keys(mapper)
    if len(keys) == 1:
        return lambda values: (values[keys[0]],)
    return operator.itemgetter(*keys)


def persist(session: Session, instance: Any, identity: Any) -> None:
    """``instance``, transient with every column's value in its ``__dict__``, made
    persistent and unchanged in ``session`` under ``identity`` (an identity key the
    session does not hold), as loading its row makes an object: its values committed, its
    relationships loaded when first read, ``loaded_as_persistent`` told. SQLAlchemy's own
    way there (``make_transient_to_detached``, then ``Session.add``) computes the identity
    again, marks every relationship expired and walks the save-update cascade: ~4% of a
    worker's Python under py-spy, for objects that hold no relationship yet."""
    state = instance_state(instance)
    if state.modified:  # values set through the attributes (a constructor's)
        state._commit_all(state.dict)
    state.key = identity
    state.identity_token = identity[2]
    state.session_id = session.hash_key
    session.identity_map._add_unpresent(state, identity)
    if session.dispatch.loaded_as_persistent:
        session.dispatch.loaded_as_persistent(session, state)


def _identity_of(mapper: Mapper[Any]) -> Callable[[Sequence[Any]], Any]:
    """A function from the values of ``mapper``'s columns (in ``column_attrs`` order) to
    the identity key of their row, None when its primary key is all NULL (no row)."""
    order = columns(mapper.class_)
    positions = [order.index(column) for column in mapper.primary_key]
    if len(positions) == 1:
        # The key ``identity_key_from_primary_key`` makes, without its call per row.
        identity_class, _, token = mapper.identity_key_from_primary_key((None,))
        position = positions[0]

        def single(values: Sequence[Any]) -> Any:
            value = values[position]
            return None if value is None else (identity_class, (value,), token)

        return single

    def identity(values: Sequence[Any]) -> Any:
        key = tuple(values[position] for position in positions)
        return None if all(value is None for value in key) else mapper.identity_key_from_primary_key(key)

    return identity


def _processed(process: Callable[[Any], Any] | None, value: Any) -> Any:
    """``value`` through a bind or result processor, as SQLAlchemy does (None included:
    a type may stand for NULL by a value)."""
    return value if process is None else process(value)
