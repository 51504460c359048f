"""The action page's tree, in memory: its actions, steps and the invocations that never
became actions, how they nest, which nodes open, and the path from the root to the leaf
that explains a failure. Built by ``queries_tree.load_tree_of_root``; pure Python, no
queries, so templates render its flat rows with a loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine import status
from engine.compensation import STEP_INDEX as COMPENSATION_STEP

#: Statuses of actions that make their parent step fail.
FAILING: frozenset[str] = frozenset({status.FAILED, status.TIMED_OUT, status.CANCELLED, status.DEADLOCKED})

#: Outcomes of invocations that failed before they became actions.
FAILED_OUTCOMES: frozenset[str] = frozenset({"failed", "deadlocked", "cancelled"})

#: Which failing child explains its parent's failure best: a failure before a timeout
#: before a deadlock before a cancellation.
CAUSE_RANK = {status.FAILED: 0, status.TIMED_OUT: 1, status.DEADLOCKED: 2, status.CANCELLED: 3}

#: A tree this small opens every node; a bigger one opens the actions of its first
#: OPEN_DEPTH levels (the root and its children), the failure path and the way to the
#: action on the page.
SMALL_TREE = 60
OPEN_DEPTH = 2


@dataclass(eq=False, slots=True)
class Node:
    """An action of the tree (or a child shared with another tree: ``foreign``)."""

    id: int
    name: str
    actor_type: str
    actor_id: str
    status: str
    root_id: int | None
    outbound: bool
    superseded_by_id: int | None
    concurrency_key: str
    current_step_index: int
    created_at: datetime | None
    started_at: datetime | None
    completed_at: datetime | None
    error_class: str | None
    error_message: str | None
    #: How many compensations its steps registered (then the tree loads them).
    compensations_count: int = 0
    foreign: bool = False
    steps: list[StepNode] = field(default_factory=list)

    @property
    def tree_id(self) -> int:
        return self.root_id if self.root_id is not None else self.id

    @property
    def actor(self) -> str:
        return f"{self.actor_type}/{self.actor_id}"

    @property
    def failing(self) -> bool:
        return self.status in FAILING

    @property
    def branch(self) -> bool:
        """Whether it has anything below it (children or invocations under its steps)."""
        return any(s.children or s.invocations for s in self.steps)


@dataclass(eq=False, slots=True)
class StepNode:
    id: int
    action_id: int
    definition_index: int
    status: str
    attempt: int
    retry_at: datetime | None
    pending_actions_count: int
    unsuccessful_actions_count: int
    started_at: datetime | None
    performed_at: datetime | None
    completed_at: datetime | None
    #: Which time the action runs this step (1 = the first; a decision going back opens another).
    visit: int = 1
    #: The body's decision (``{"go_to": name}``, ``{"finish": true}``, ``{"fail": reason}``), if any.
    decision: dict[str, Any] | None = None
    children: list[int] = field(default_factory=list)
    invocations: list[Unadmitted] = field(default_factory=list)

    @property
    def number(self) -> int:
        return self.definition_index + 1

    @property
    def failing(self) -> bool:
        return self.status == status.STEP_FAILED or self.unsuccessful_actions_count > 0


@dataclass(eq=False, slots=True)
class Unadmitted:
    """An invocation under a step that is not an action: a wait, work skipped because it
    was achieved, refused before admission (its ``before`` hook, a deadlock), or not yet
    admitted."""

    id: int
    kind: str
    name: str
    actor_type: str
    actor_id: str
    parent_step_id: int
    outcome: str | None
    error_class: str | None
    error_message: str | None
    created_at: datetime | None
    due_at: datetime | None
    settled_at: datetime | None
    concluded_at: datetime | None
    succeeded: bool | None
    #: Its arguments: a wait for signals lists the names it waits for.
    arguments_json: Any = None

    @property
    def actor(self) -> str:
        return f"{self.actor_type}/{self.actor_id}"

    @property
    def failed(self) -> bool:
        return self.kind == "action" and self.outcome in FAILED_OUTCOMES and self.succeeded is False

    @property
    def label(self) -> str:
        """What became of it, in words."""
        if self.kind == "wait":
            return "waited" if self.concluded_at is not None else "waiting"
        if self.outcome is None:
            return "awaiting admission"
        return {"skipped": "skipped (already achieved)", "cancelled": "cancelled before admission"}.get(
            self.outcome, f"{self.outcome} before admission"
        )


@dataclass(eq=False, slots=True)
class CompensationNode:
    """A compensation a step registered: what undoes it, its turn and its progress."""

    id: int
    action_id: int
    #: The step whose work it undoes, and the step of the action that runs it (once started).
    step_id: int
    name: str
    actor_type: str
    actor_id: str
    status: str
    sequence: int | None
    compensation_step_id: int | None
    error_class: str | None
    error_message: str | None
    #: The compensating action, once admitted (the child of its step).
    child_id: int | None = None


@dataclass(frozen=True, slots=True)
class Row:
    """One token of the flattened tree: ``open``/``close`` an action with children,
    ``leaf`` action, ``ref`` to an action already shown, ``step_open``/``step_close``/
    ``step`` (a step without anything below it), ``invocation``."""

    kind: str
    depth: int
    node: Node | None = None
    step: StepNode | None = None
    invocation: Unadmitted | None = None
    open: bool = False


@dataclass(frozen=True, slots=True)
class FailurePath:
    """From the root down to the failing leaf: ``actions`` in order, the step of each that
    failed (``steps[i]`` belongs to ``actions[i]``; None for the leaf when it failed
    without a failing step), and ``invocation`` when the leaf is an invocation refused
    before admission."""

    actions: list[Node]
    steps: list[StepNode | None]
    invocation: Unadmitted | None = None

    @property
    def leaf(self) -> Node:
        return self.actions[-1]

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(a.id for a in self.actions)


@dataclass(eq=False)
class Tree:
    root_id: int
    nodes: dict[int, Node]
    steps: dict[int, StepNode]
    #: Actions of the tree no edge leads to from the root (shown after it).
    unreached: list[int] = field(default_factory=list)
    #: Compensations of the tree's actions, by the id of the step each undoes (loaded only
    #: when an action of the tree registered some).
    compensations: dict[int, list[CompensationNode]] = field(default_factory=dict)

    def step_labels(self, names: dict[int, str]) -> dict[int, str]:
        """Each step by id, in words: "step <its declared name>" (``names``; else "step
        N"), with its visit; a step running a compensation: "compensation N: undoes step …"."""
        labels: dict[int, str] = {}
        for s in self.steps.values():
            visit = f" (visit {s.visit})" if s.visit > 1 else ""
            labels[s.id] = f"step {names.get(s.id) or s.number}{visit}"
        for s in self.steps.values():
            if s.definition_index == COMPENSATION_STEP:
                running = self.compensation_running_on(s.id)
                undone = labels.get(running.step_id) if running is not None else None
                turn = f" {running.sequence}" if running is not None and running.sequence else ""
                labels[s.id] = f"compensation{turn}" + (f": undoes {undone}" if undone else "")
        return labels

    def compensation_names(self) -> dict[int, str]:
        """The steps running compensations, by id, named after what they run ("undo refund")."""
        names: dict[int, str] = {}
        for s in self.steps.values():
            if s.definition_index == COMPENSATION_STEP:
                running = self.compensation_running_on(s.id)
                names[s.id] = f"undo {running.name}" if running is not None else "compensation"
        return names

    def compensations_of(self, action_id: int) -> list[CompensationNode]:
        """The compensations of one action, in turn (then as registered)."""
        found = [c for cs in self.compensations.values() for c in cs if c.action_id == action_id]
        return sorted(found, key=lambda c: (c.sequence or 1 << 62, c.id))

    def compensation_running_on(self, step_id: int) -> CompensationNode | None:
        """The compensation that the compensation step ``step_id`` runs."""
        for found in self.compensations.values():
            for compensation in found:
                if compensation.compensation_step_id == step_id:
                    return compensation
        return None

    @property
    def root(self) -> Node:
        return self.nodes[self.root_id]

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def running(self) -> bool:
        """Anything pending, performing or compensating, or an invocation still awaiting admission."""
        return any(n.status in status.UNFINISHED for n in self.nodes.values()) or any(
            i.kind == "action" and i.settled_at is None for s in self.steps.values() for i in s.invocations
        )

    def parents(self) -> dict[int, int]:
        """A parent action of each action below the root (the first edge found)."""
        found: dict[int, int] = {}
        for step in self.steps.values():
            for child in step.children:
                found.setdefault(child, step.action_id)
        return found

    def ancestors(self, action_id: int) -> list[int]:
        """From the root down to ``action_id`` (included)."""
        parents = self.parents()
        path = [action_id]
        while path[-1] in parents and parents[path[-1]] not in path:
            path.append(parents[path[-1]])
        return list(reversed(path))

    def children(self, action_id: int) -> Iterator[tuple[StepNode, Node]]:
        node = self.nodes.get(action_id)
        for step in node.steps if node is not None else ():
            for child in step.children:
                yield step, self.nodes[child]

    # --- the failure path -----------------------------------------------------------------

    def failure_path(self) -> FailurePath | None:
        """From the root, follow the failing step and its failing child that explains it,
        down to the deepest failing action (or an invocation refused before admission).
        None when nothing in the tree is failing."""
        actions: list[Node] = []
        steps: list[StepNode | None] = []
        current: Node | None = self.root
        invocation: Unadmitted | None = None
        while current is not None and current.id not in {a.id for a in actions}:
            actions.append(current)
            step, child, refused = self.cause_below(current)
            steps.append(step)
            if refused is not None:
                invocation = refused
                break
            current = child
        leaf = actions[-1]
        # A skipped leaf succeeded with its failed step: nothing is failing any more.
        if invocation is None and (
            leaf.status == status.SUCCEEDED or (not leaf.failing and not (steps[-1] and steps[-1].failing))
        ):
            return None
        return FailurePath(actions, steps, invocation)

    def cause_below(self, node: Node) -> tuple[StepNode | None, Node | None, Unadmitted | None]:
        """The failing step of ``node`` and the child (or refused invocation) that failed it."""
        if node.foreign:
            return None, None, None
        failing_steps = [s for s in reversed(node.steps) if s.failing]
        for step in failing_steps:
            candidates: list[tuple[tuple[int, datetime, int], Node | Unadmitted]] = []
            for child_id in step.children:
                child = self.nodes[child_id]
                if not child.failing:
                    continue
                # A cancelled child of a cancelled or timed-out action was most likely
                # cancelled with it: it is not the cause.
                if child.status == status.CANCELLED and node.status in (status.CANCELLED, status.TIMED_OUT):
                    continue
                rank = (CAUSE_RANK[child.status], child.completed_at or datetime.max, child.id)
                candidates.append((rank, child))
            for inv in step.invocations:
                if inv.failed:
                    outcome = inv.outcome or status.FAILED
                    rank = (CAUSE_RANK.get(outcome, 0), inv.concluded_at or datetime.max, inv.id)
                    candidates.append((rank, inv))
            if candidates:
                best = min(candidates, key=lambda c: c[0])[1]
                if isinstance(best, Unadmitted):
                    return step, None, best
                return step, best, None
        return (failing_steps[0] if failing_steps else None), None, None

    # --- rendering ------------------------------------------------------------------------

    def rows(self, *, expand: bool = False, keep_open: frozenset[int] = frozenset()) -> list[Row]:
        """The tree flattened depth-first, iteratively. An action is open when ``expand``,
        when the tree is small, near the root, or in ``keep_open``."""
        expand = expand or len(self.nodes) <= SMALL_TREE
        rows: list[Row] = []
        shown: set[int] = set()
        # The stack holds work items: ("node", id, depth) or a prepared closing Row.
        stack: list[tuple[str, int, int] | Row] = [("node", i, 0) for i in reversed(self.unreached)]
        stack.append(("node", self.root_id, 0))
        while stack:
            item = stack.pop()
            if isinstance(item, Row):
                rows.append(item)
                continue
            _, action_id, depth = item
            node = self.nodes[action_id]
            if action_id in shown:
                rows.append(Row("ref", depth, node=node))
                continue
            shown.add(action_id)
            if node.foreign or not node.branch:
                rows.append(Row("leaf", depth, node=node))
                continue
            # Depths count steps too: an action's children are two levels below it.
            is_open = expand or depth < 2 * OPEN_DEPTH or action_id in keep_open
            rows.append(Row("open", depth, node=node, open=is_open))
            pending: list[tuple[str, int, int] | Row] = []
            for step in node.steps:
                if not step.children and not step.invocations:
                    pending.append(Row("step", depth + 1, step=step))
                    continue
                pending.append(Row("step_open", depth + 1, step=step))
                pending.extend(("node", child, depth + 2) for child in step.children)
                pending.extend(Row("invocation", depth + 2, invocation=i) for i in step.invocations)
                pending.append(Row("step_close", depth + 1, step=step))
            pending.append(Row("close", depth, node=node))
            stack.extend(reversed(pending))
        return rows
