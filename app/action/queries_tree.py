"""The read model of the action page: one action's whole tree and its failure path (its
timeline, history and errors are in ``queries_timeline``). It only reads.

A tree is loaded in a few queries whatever its size (issue 5: a 1,000-node tree in under
300 ms): the actions of the tree (``root_id = :root OR id = :root``), their steps, the
edges from those steps to their children, the children that belong to another tree (work
shared by reuse, or a replacement queued by another tree), and the invocations that never
became actions (waits, work skipped or refused before admission). The tree is then built
in Python (``tree_model``) and flattened into rows, so templates render it with a loop,
never recursion: a chain of a thousand actions renders like a bush of a thousand.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import BigInteger, ColumnElement, Select, any_, bindparam, or_, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session, scoped_session

from engine.models import Action, Compensation, Invocation, Step, step_actions

from .tree_model import CompensationNode, Node, StepNode, Tree, Unadmitted

#: The studio passes Flask-SQLAlchemy's scoped session; tests pass a plain one.
AnySession = Session | scoped_session[Any]

#: Events that carry an error (``error_class``, ``error_message``, ``traceback``).
ERROR_EVENTS = (
    "attempt_failed",
    "step_failed",
    "step_errored",
    "callback_failed",
    "completed",
    "invocation_failed",
    "invocation_deadlocked",
)

# The columns of each query, in the order of the fields of the dataclass built from a row.
ACTION_COLUMNS: tuple[Any, ...] = (
    Action.id,
    Action.name,
    Action.actor_type,
    Action.actor_id,
    Action.status,
    Action.root_id,
    Action.outbound,
    Action.superseded_by_id,
    Action.concurrency_key,
    Action.current_step_index,
    Action.created_at,
    Action.started_at,
    Action.completed_at,
    Action.error_class,
    Action.error_message,
    Action.compensations_count,
)

STEP_COLUMNS: tuple[Any, ...] = (
    Step.id,
    Step.action_id,
    Step.definition_index,
    Step.status,
    Step.attempt,
    Step.retry_at,
    Step.pending_actions_count,
    Step.unsuccessful_actions_count,
    Step.started_at,
    Step.performed_at,
    Step.completed_at,
    Step.visit,
    Step.decision,
)

INVOCATION_COLUMNS: tuple[Any, ...] = (
    Invocation.id,
    Invocation.kind,
    Invocation.name,
    Invocation.actor_type,
    Invocation.actor_id,
    Invocation.parent_step_id,
    Invocation.outcome,
    Invocation.error_class,
    Invocation.error_message,
    Invocation.created_at,
    Invocation.due_at,
    Invocation.settled_at,
    Invocation.concluded_at,
    Invocation.succeeded,
    Invocation.arguments_json,
)


def load_tree_of_root(session: AnySession, root_id: int) -> Tree | None:
    """The tree whose root is ``root_id``, in four queries (five when a child is shared
    with another tree), whatever its size. None when there is no such root."""
    in_tree = or_(Action.root_id == root_id, Action.id == root_id)
    nodes = {row.id: Node(*row) for row in session.execute(select(*ACTION_COLUMNS).where(in_tree))}
    if root_id not in nodes:
        return None
    postgresql = session.get_bind().dialect.name == "postgresql"
    steps: dict[int, StepNode] = {}
    tree_ids = select(Action.id).where(in_tree)
    for step_row in session.execute(
        select(*STEP_COLUMNS)
        .where(among(Step.action_id, list(nodes), tree_ids, postgresql))
        # In the order they ran: a decision that goes back to a step opens its next visit.
        .order_by(Step.action_id, Step.id)
    ):
        step = StepNode(*step_row)
        steps[step.id] = step
        nodes[step.action_id].steps.append(step)
    if steps:
        tree_steps = select(Step.id).where(Step.action_id.in_(tree_ids))
        edges = session.execute(
            select(step_actions.c.parent_step_id, step_actions.c.child_action_id)
            .where(among(step_actions.c.parent_step_id, list(steps), tree_steps, postgresql))
            .order_by(step_actions.c.parent_step_id, step_actions.c.child_action_id)
        ).all()
        outside = {child for _, child in edges if child not in nodes}
        if outside:
            for shared in session.execute(select(*ACTION_COLUMNS).where(Action.id.in_(sorted(outside)))):
                nodes[shared.id] = node = Node(*shared)
                node.foreign = True
        for step_id, child in edges:
            steps[step_id].children.append(child)
        # On SQLite, "action_id + 0" keeps the planner on the parent step's index rather
        # than the index of every invocation without an action (all the waits ever made).
        unadmitted = Invocation.action_id if postgresql else Invocation.action_id + 0
        for invocation_row in session.execute(
            select(*INVOCATION_COLUMNS)
            .where(
                among(Invocation.parent_step_id, list(steps), tree_steps, postgresql), unadmitted.is_(None)
            )
            .order_by(Invocation.id)
        ):
            invocation = Unadmitted(*invocation_row)
            steps[invocation.parent_step_id].invocations.append(invocation)
    tree = Tree(root_id, nodes, steps)
    undoing = [i for i, n in nodes.items() if n.compensations_count]
    if undoing:  # only a tree with compensations reads them
        tree.compensations = compensations(session, undoing, steps)
    reached = {root_id} | {c for s in steps.values() for c in s.children}
    tree.unreached = sorted(i for i, n in nodes.items() if i not in reached and not n.foreign)
    return tree


def among(column: Any, ids: list[int], subquery: Select[Any], postgresql: bool) -> ColumnElement[bool]:
    """``column`` is one of ``ids``. PostgreSQL gets the ids as one array parameter, so
    it plans with their true number (an index scan), whereas a subquery's rows would be
    estimated from the statistics of ``root_id`` and could turn into a scan of the whole
    table. SQLite, whose planner prefers indexes anyway, gets the subquery that found
    them (no limit on the number of parameters)."""
    if postgresql:
        return cast(ColumnElement[bool], column == any_(bindparam(None, ids, type_=ARRAY(BigInteger))))
    return cast(ColumnElement[bool], column.in_(subquery))


COMPENSATION_COLUMNS: tuple[Any, ...] = (
    Compensation.id,
    Compensation.action_id,
    Compensation.step_id,
    Compensation.name,
    Compensation.actor_type,
    Compensation.actor_id,
    Compensation.status,
    Compensation.sequence,
    Compensation.compensation_step_id,
    Compensation.error_class,
    Compensation.error_message,
)


def compensations(
    session: AnySession, action_ids: list[int], steps: dict[int, StepNode]
) -> dict[int, list[CompensationNode]]:
    """The compensations of ``action_ids``, by the step each undoes (one query, only for a
    tree that has some), each with the action that ran it (its step's child)."""
    found: dict[int, list[CompensationNode]] = {}
    for row in session.execute(
        select(*COMPENSATION_COLUMNS).where(Compensation.action_id.in_(action_ids)).order_by(Compensation.id)
    ):
        node = CompensationNode(*row)
        runner = steps.get(node.compensation_step_id) if node.compensation_step_id else None
        if runner is not None and runner.children:
            node.child_id = runner.children[-1]
        found.setdefault(node.step_id, []).append(node)
    return found
