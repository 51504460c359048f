"""Trees for the action page's tests, built with the engine's API (and one generated
directly in the tables: a 1,000-node tree, too big to run through the engine in a test).

    failing_trip(car)      trip -> leg -> breakdown (fails); trip -> errand -> honk (succeeds)
    waiting_order(car)     order -> approval (outbound, waits for an operator)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import event, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import engine
from engine import clock, testing
from engine.models import Action, Step, step_actions
from tests.domain import Car


def order_paint(car: Car, *colors: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


@dataclass
class Trip:
    trip: Action
    leg: Action
    breakdown: Action
    errand: Action
    honk: Action


def failing_trip(session: Session, car: Car) -> Trip:
    """trip (root) -> step 1 -> leg -> step 1 -> breakdown, which raises RuntimeError;
    trip -> step 1 -> errand -> honk, which succeeds. Everything has run."""
    engine.define(Car, "breakdown")
    leg = engine.define(Car, "leg")

    @leg.step
    def go(car: Car, step: engine.StepContext) -> None:
        step.do("breakdown")

    errand = engine.define(Car, "errand")

    @errand.step
    def beep(car: Car, step: engine.StepContext) -> None:
        step.do("honk")

    trip = engine.define(Car, "trip")

    @trip.step
    def start(car: Car, step: engine.StepContext, destination: str) -> None:
        step.do("leg")
        step.do("errand")

    with testing.handle_exceptions():
        engine.now(car, "trip", "Paris")
        testing.drain()
    session.expire_all()
    by_name = {a.name: a for a in session.scalars(select(Action))}
    return Trip(*(by_name[n] for n in ("trip", "leg", "breakdown", "errand", "honk")))


def waiting_order(session: Session, car: Car) -> tuple[Action, Action]:
    """order (root) -> approval, an outbound action waiting to be completed from outside."""
    engine.define(Car, "approval", order_paint, outbound=True)
    order = engine.define(Car, "order")

    @order.step
    def ask(car: Car, step: engine.StepContext, amount: int) -> None:
        step.do("approval", "blue")

    engine.now(car, "order", 120)
    testing.drain()
    session.expire_all()
    root = session.scalars(select(Action).where(Action.name == "order")).one()
    approval = session.scalars(select(Action).where(Action.name == "approval")).one()
    return root, approval


def status_of(session: Session, action_id: int) -> str:
    session.expire_all()
    return session.scalars(select(Action.status).where(Action.id == action_id)).one()


# --- a generated tree ----------------------------------------------------------------------


def generated_tree(session: Session, size: int, *, chain: int = 0, fail_at: int | None = None) -> int:
    """Insert a tree of ``size`` actions directly (no engine run): a root whose single step
    waits on ten branches of ten children each, whose leaves fill up the rest, plus a chain
    ``chain`` actions deep. Every action has one step; all succeeded except, with
    ``fail_at``, the ``fail_at``-th leaf (or child, in a tree too small for leaves) and
    its ancestors. Returns the root's id."""
    now = clock.now()
    start = now - timedelta(minutes=10)
    connection = session.connection()

    def add_action(name: str, parent_step: int | None, root_id: int | None) -> tuple[int, int]:
        action_id = connection.execute(
            insert(Action)
            .values(
                actor_type="Car",
                actor_id="1",
                name=name,
                arguments=[name],
                status="succeeded",
                root=parent_step is None,
                root_id=root_id,
                outbound=False,
                concurrency_key=f"Car/1/{name}",
                checksum_key=f"Car/1/{name}",
                current_step_index=0,
                created_at=start,
                updated_at=start,
                started_at=start + timedelta(seconds=1),
                completed_at=start + timedelta(seconds=30),
            )
            .returning(Action.id)
        ).scalar_one()
        step_id = connection.execute(
            insert(Step)
            .values(
                action_id=action_id,
                definition_index=0,
                status="succeeded",
                attempt=1,
                pending_actions_count=0,
                unsuccessful_actions_count=0,
                created_at=start,
                updated_at=start,
                started_at=start + timedelta(seconds=1),
                performed_at=start + timedelta(seconds=2),
                completed_at=start + timedelta(seconds=29),
            )
            .returning(Step.id)
        ).scalar_one()
        if parent_step is not None:
            connection.execute(
                insert(step_actions).values(parent_step_id=parent_step, child_action_id=action_id)
            )
        return action_id, step_id

    root_id, root_step = add_action("root", None, None)
    made = 1
    parents: list[tuple[int, int]] = []
    for b in range(10):
        if made >= size - chain:
            break
        parents.append(add_action(f"branch{b}", root_step, root_id))
        made += 1
    layer: list[tuple[int, int]] = []
    for _branch_id, branch_step in parents:
        for c in range(10):
            if made >= size - chain:
                break
            layer.append(add_action(f"child{c}", branch_step, root_id))
            made += 1
    leaves: list[int] = []
    i = 0
    while made < size - chain and layer:
        _, parent_step = layer[i % len(layer)]
        leaves.append(add_action(f"leaf{i}", parent_step, root_id)[0])
        made += 1
        i += 1
    step = root_step
    for depth in range(chain):
        _, step = add_action(f"deep{depth}", step, root_id)
        made += 1
    if fail_at is not None:
        fail_leaf(session, leaves[fail_at] if leaves else layer[fail_at][0])
    session.commit()
    return root_id


def fail_leaf(session: Session, leaf_id: int) -> None:
    """Mark ``leaf_id`` failed and every ancestor failed by it."""
    connection = session.connection()
    connection.execute(
        update(Action)
        .where(Action.id == leaf_id)
        .values(status="failed", error_class="builtins.RuntimeError", error_message="generated failure")
    )
    current = leaf_id
    while True:
        parent = connection.execute(
            select(Step.id, Step.action_id)
            .join(step_actions, step_actions.c.parent_step_id == Step.id)
            .where(step_actions.c.child_action_id == current)
        ).first()
        if parent is None:
            return
        connection.execute(
            update(Step).where(Step.id == parent.id).values(status="failed", unsuccessful_actions_count=1)
        )
        connection.execute(update(Action).where(Action.id == parent.action_id).values(status="failed"))
        current = parent.action_id


# --- counting queries ----------------------------------------------------------------------


@dataclass
class QueryLog:
    statements: list[str]

    def __len__(self) -> int:
        return len(self.statements)

    def touching(self, table: str) -> list[str]:
        return [s for s in self.statements if re.search(rf"\b{table}\b", s)]


#: Transaction control and settings: not counted as queries.
NOT_QUERIES = ("PRAGMA", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "SET LOCAL")


@contextmanager
def counting_queries(sa_engine: Engine) -> Iterator[QueryLog]:
    """Every statement ``sa_engine`` executes inside the block (a SQLAlchemy event), but
    transaction control and settings (the studio's ``SET LOCAL plan_cache_mode``)."""
    log = QueryLog([])

    def count(conn: object, cursor: object, statement: str, *args: object) -> None:
        if not statement.lstrip().upper().startswith(NOT_QUERIES):
            log.statements.append(statement)

    event.listen(sa_engine, "before_cursor_execute", count)
    try:
        yield log
    finally:
        event.remove(sa_engine, "before_cursor_execute", count)
