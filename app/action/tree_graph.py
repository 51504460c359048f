"""The action page's graph of its tree: a tidy tree drawn left to right, laid out here and
rendered as SVG by ``action/_graph.html`` (no script needed to draw or to click it).

Actions are dots coloured by status; each step with anything below it is a small square
between its action and its children, so edges go per step; the failure path is drawn
bold. In a big tree, a run of sibling leaves alike (same status, none on the failure path
nor the page's own) is drawn as one stacked node, "12 succeeded", linking to them in the
list: a bush of a thousand stays a readable shape. Leaves take one row each in depth-first
order and a parent sits midway between its first and last child (the layout of a file
tree, with the edges drawn): one pass down and one back up, iteratively, so a chain of a
thousand actions lays out like a bush of a thousand, in linear time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .tree_model import SMALL_TREE, FailurePath, Node, StepNode, Tree, Unadmitted

#: Geometry, in SVG user units (pixels at 100 %).
ROW = 20
COLUMN = 200
STEP_AT = 130  # how far right of its action a step's square sits
PAD_X = 14
PAD_Y = 18
LABEL = 26  # longest label, in characters
#: A tree with more actions than this draws runs of at least CLUSTER sibling leaves alike
#: as one node (tree_model.SMALL_TREE: the size up to which the list opens every node too).
CLUSTER_ABOVE = SMALL_TREE
CLUSTER = 4


@dataclass(slots=True)
class Item:
    """A drawn element: an action (``node``), a step (``step``), an invocation that is not an
    action (``invocation``), a second edge to an action drawn elsewhere (``ref``), or a run
    of sibling leaves alike (``cluster``: ``members``, the first of which is ``node``)."""

    kind: str
    x: float
    y: float = -1.0
    node: Node | None = None
    step: StepNode | None = None
    invocation: Unadmitted | None = None
    label: str = ""
    status: str = ""
    on_path: bool = False
    here: bool = False
    children: list[int] = field(default_factory=list)
    members: list[Node] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Edge:
    path: str
    status: str
    on_path: bool
    ref: bool = False


@dataclass(slots=True)
class Graph:
    items: list[Item]
    edges: list[Edge]
    width: int
    height: int

    @property
    def nodes(self) -> list[Item]:
        return [i for i in self.items if i.kind not in ("step", "cluster")]

    @property
    def clusters(self) -> list[Item]:
        return [i for i in self.items if i.kind == "cluster"]

    @property
    def steps(self) -> list[Item]:
        return [i for i in self.items if i.kind == "step"]


def layout(
    tree: Tree, path: FailurePath | None, here: int, step_names: dict[int, str] | None = None
) -> Graph:
    """The graph of ``tree``, with the failure ``path`` bold and action ``here`` marked.
    ``step_names``: step id -> its declared name (default: "step N")."""
    names = step_names or {}
    clustering = len(tree) > CLUSTER_ABOVE
    path_ids = path.ids if path is not None else frozenset()
    path_steps = {s.id for s in path.steps if s is not None} if path is not None else set()
    path_invocation = path.invocation.id if path is not None and path.invocation is not None else None
    items: list[Item] = []
    shown: set[int] = set()
    rows = 0
    # Work items: (kind, object, depth, parent item index); popped in depth-first order.
    stack: list[tuple[str, object, int, int]] = [("node", i, 0, -1) for i in reversed(tree.unreached)]
    stack.append(("node", tree.root_id, 0, -1))
    while stack:
        kind, obj, depth, parent = stack.pop()
        x = PAD_X + depth * COLUMN
        item: Item
        if kind == "node":
            assert isinstance(obj, int)
            node = tree.nodes[obj]
            if obj in shown:
                item = Item("ref", x, node=node, label=f"#{node.id} (drawn above)", status=node.status)
            else:
                shown.add(obj)
                item = Item(
                    "node",
                    x,
                    node=node,
                    label=short(f"#{node.id} {node.name}"),
                    status=node.status,
                    on_path=obj in path_ids,
                    here=obj == here,
                )
                content = [] if node.foreign else [s for s in node.steps if s.children or s.invocations]
                for step in reversed(content):
                    stack.append(("step", step, depth, len(items)))
        elif kind == "step":
            assert isinstance(obj, StepNode)
            step = obj
            label = names.get(step.id) or f"step {step.number}"
            item = Item(
                "step",
                x + STEP_AT,
                step=step,
                label=label,
                status=step.status,
                on_path=step.id in path_steps,
            )
            index = len(items)
            for invocation in reversed(step.invocations):
                stack.append(("invocation", invocation, depth + 1, index))
            groups = (
                runs(tree, step.children, path_ids, here, shown)
                if clustering
                else [[c] for c in step.children]
            )
            for group in reversed(groups):
                if len(group) == 1:
                    stack.append(("node", group[0], depth + 1, index))
                else:
                    stack.append(("cluster", group, depth + 1, index))
        elif kind == "cluster":
            assert isinstance(obj, list)
            members = [tree.nodes[i] for i in obj]
            shown.update(obj)
            first = members[0]
            item = Item(
                "cluster",
                x,
                node=first,
                label=short(f"{len(members)} {first.status.replace('_', ' ')}: {first.name}, …"),
                status=first.status,
                members=members,
            )
        else:
            assert isinstance(obj, Unadmitted)
            invocation = obj
            state = "failed" if invocation.failed else ("succeeded" if invocation.concluded_at else "pending")
            item = Item(
                "invocation",
                x,
                invocation=invocation,
                label=short(f"{invocation.name} · {invocation.label}"),
                status=state,
                on_path=invocation.id == path_invocation,
            )
        if parent >= 0:
            items[parent].children.append(len(items))
        items.append(item)
        if item.kind in ("ref", "invocation", "cluster") or (item.kind == "node" and not has_content(item)):
            item.y = PAD_Y + rows * ROW
            rows += 1
    # Back up: a parent midway between its first and last child.
    for item in reversed(items):
        if item.y < 0:
            if item.children:
                item.y = (items[item.children[0]].y + items[item.children[-1]].y) / 2
            else:  # cannot happen: a step is only drawn with something below it
                item.y = PAD_Y + rows * ROW
                rows += 1
    edges = []
    for item in items:
        for child_index in item.children:
            child = items[child_index]
            on_path = item.on_path and child.on_path
            state = child.status
            edges.append(
                Edge(curve(item.x, item.y, child.x, child.y), state, on_path, ref=child.kind == "ref")
            )
    depth = max((int((i.x - PAD_X) // COLUMN) for i in items), default=0)
    return Graph(items, edges, PAD_X * 2 + depth * COLUMN + 7 * LABEL, PAD_Y * 2 + max(rows - 1, 0) * ROW)


def runs(
    tree: Tree, children: list[int], path_ids: frozenset[int], here: int, shown: set[int]
) -> list[list[int]]:
    """``children`` in order, runs of at least CLUSTER leaves alike grouped together: same
    status, not on the failure path, not the page's action, not drawn already, not shared."""
    groups: list[list[int]] = []
    run: list[int] = []
    key: str | None = None

    def close() -> None:
        if len(run) >= CLUSTER:
            groups.append(list(run))
        else:
            groups.extend([c] for c in run)
        run.clear()

    for child in children:
        node = tree.nodes[child]
        alike = not (
            node.foreign
            or child in path_ids
            or child == here
            or child in shown
            or child in run
            or any(s.children or s.invocations for s in node.steps)
        )
        if alike and node.status == key:
            run.append(child)
            continue
        close()
        if alike:
            run.append(child)
            key = node.status
        else:
            groups.append([child])
            key = None
    close()
    return groups


def has_content(item: Item) -> bool:
    node = item.node
    return node is not None and not node.foreign and any(s.children or s.invocations for s in node.steps)


def curve(x1: float, y1: float, x2: float, y2: float) -> str:
    """A horizontal S-curve from (x1, y1) to (x2, y2)."""
    if y1 == y2:
        return f"M{x1:g} {y1:g}H{x2:g}"
    mid = (x1 + x2) / 2
    return f"M{x1:g} {y1:g}C{mid:g} {y1:g} {mid:g} {y2:g} {x2:g} {y2:g}"


def short(text: str) -> str:
    return text if len(text) <= LABEL else text[: LABEL - 1] + "…"
