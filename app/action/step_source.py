"""Reading step functions' source without running it (``inspect`` + ``ast``): the child
actions a step calls with a literal name, for the catalog's diagrams; and the names of a
definition's steps and parameters as declared, for the action page (``declared``)."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from engine import registry
from engine.errors import ActorNotFound

if TYPE_CHECKING:
    from .tree_model import Tree

#: Longest source text shown for a key or checksum callable.
SOURCE_SHOWN = 120


@dataclass(frozen=True)
class Declared:
    """What the definition of an action says of its shape: the name of each step (prepended
    steps first) and the names of the parameters its arguments bind to."""

    steps: tuple[str | None, ...]
    parameters: tuple[str, ...]
    #: The name of a ``*args`` parameter that takes the rest, if any.
    rest: str | None = None
    #: Its retry policy's attempts per run (1: no retries).
    max_attempts: int = 1

    def in_run(self, attempt: int) -> int:
        """Which try of its run (an operator's retry starts a new one) ``attempt`` is."""
        return (attempt - 1) % self.max_attempts + 1

    def step(self, index: int) -> str | None:
        return self.steps[index] if 0 <= index < len(self.steps) else None

    def named(self, arguments: list[Any]) -> list[tuple[str, Any]]:
        """Each argument with the name of its parameter (``*rest[i]`` past the named ones,
        ``#i`` when nothing declares it)."""
        named = []
        for i, value in enumerate(arguments):
            if i < len(self.parameters):
                named.append((self.parameters[i], value))
            elif self.rest is not None:
                named.append((f"*{self.rest}[{i - len(self.parameters)}]", value))
            else:
                named.append((f"#{i + 1}", value))
        return named


def declared(actor_type: str, name: str) -> Declared | None:
    """The declared shape of action ``name`` on ``actor_type``, or None when this process
    does not know it (its module is not imported, or a deploy removed it)."""
    try:
        cls = registry.actor_class(actor_type)
    except ActorNotFound:
        return None
    definition = registry.find(cls, name)
    method = getattr(cls, name, None)
    if definition is None:
        return _declared(None, (name,), method) if callable(method) else None
    fns = [*definition.prepended, *definition.steps]
    names = tuple(step_name(fn) for fn in fns)
    if not definition.steps:
        job = getattr(definition.job, "actor_name", None) if definition.job is not None else None
        names += (f"job {job}" if job else step_name(definition.method) or name,)
    body = (definition.steps or definition.prepended or [None])[0]
    shape = _declared(body, names, definition.method or method)
    return Declared(shape.steps, shape.parameters, shape.rest, definition.retry.max_attempts)


def step_name(fn: Any) -> str | None:
    """A step function's name; None for a lambda (it has none)."""
    name = getattr(fn, "__name__", None)
    return None if name is None or name == "<lambda>" else str(name)


def _declared(step_fn: Any, names: tuple[str | None, ...], method: Any) -> Declared:
    """Parameters: a step's after (actor, step), else the method's after self."""
    fn, skip = (step_fn, 2) if step_fn is not None else (method, 1)
    if not callable(fn):
        return Declared(names, ())
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return Declared(names, ())
    params = list(signature.parameters.values())[skip:]
    positional = tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    rest = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
    return Declared(names, positional, rest)


@dataclass(frozen=True)
class Call:
    """A child action a step calls (``name`` None: dynamic, only ``expression`` is known)."""

    name: str | None
    expression: str
    #: The actors it runs on, for ``step.on(actors, ...)`` or ``step.do(other.name)``; None:
    #: the step's own actor.
    on: str | None = None
    #: Inside a loop (maybe many), or under a condition (maybe none).
    repeated: bool = False
    conditional: bool = False
    #: ``on`` names the step's own actor (``step.on([car], ...)``): its class is known.
    own_actor: bool = False


@dataclass(frozen=True)
class Found:
    """What a step function's source starts and decides."""

    calls: list[Call]
    #: Timers (``step.wait``) and waits for signals (``step.wait_for…``), as written.
    waits: list[str]
    #: The decisions it can take: ("go_to", step name or None when not a literal),
    #: ("finish", None), ("fail", None); each once, in source order.
    decisions: list[tuple[str, str | None]]


def step_calls(fn: Callable[..., Any]) -> Found | None:
    """The child actions, waits and decisions a step function's source starts, or None when
    its source cannot be read."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    return _step_calls(code)


@lru_cache(maxsize=1024)
def _step_calls(code: Any) -> Found | None:
    node = _function_node(code)
    if node is None:
        return None
    params = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
    if len(params) < 2:
        return Found([], [], [])
    finder = _CallFinder(actor=params[0], step=params[1])
    for statement in node.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else [node.body]:
        finder.visit(statement)
    return Found(finder.calls, finder.waits, finder.decisions)


FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


def _function_node(code: Any) -> FunctionNode | None:
    """The AST of the function compiled to ``code``, from its source file."""
    try:
        lines, _ = inspect.getsourcelines(code)
    except (OSError, TypeError):
        return None
    source = textwrap.dedent("".join(lines))
    if code.co_name == "<lambda>":
        return _lambda_node(source, code)
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == code.co_name:
            return node
    return None


def _lambda_node(source: str, code: Any) -> ast.Lambda | None:
    """The lambda with ``code``'s parameters in ``source``, which may be a fragment of a
    statement (``checksum=lambda car, place: place,``): the longest text from a ``lambda``
    keyword, ending before a delimiter, that parses as that lambda."""
    params = list(code.co_varnames[: code.co_argcount])
    for match in re.finditer(r"\blambda\b", source):
        tail = source[match.start() : match.start() + 2000]
        ends = [len(tail), *(i for i, char in enumerate(tail) if char in ",)]}\n")]
        for end in sorted(set(ends), reverse=True)[:400]:
            try:
                node = ast.parse(tail[:end].strip(), mode="eval").body
            except SyntaxError:
                continue
            if isinstance(node, ast.Lambda) and [a.arg for a in node.args.args] == params:
                return node
    return None


class _CallFinder(ast.NodeVisitor):
    def __init__(self, actor: str, step: str) -> None:
        self.actor = actor
        self.step = step
        self.calls: list[Call] = []
        self.waits: list[str] = []
        self.decisions: list[tuple[str, str | None]] = []
        self._loops = 0
        self._conditions = 0

    def _nested(self, node: ast.AST, attr: str) -> None:
        setattr(self, attr, getattr(self, attr) + 1)
        self.generic_visit(node)
        setattr(self, attr, getattr(self, attr) - 1)

    def visit_For(self, node: ast.For) -> None:
        self._nested(node, "_loops")

    visit_AsyncFor = visit_For  # type: ignore[assignment]
    visit_While = visit_For  # type: ignore[assignment]
    visit_ListComp = visit_For  # type: ignore[assignment]
    visit_SetComp = visit_For  # type: ignore[assignment]
    visit_GeneratorExp = visit_For  # type: ignore[assignment]
    visit_DictComp = visit_For  # type: ignore[assignment]

    def visit_If(self, node: ast.If) -> None:
        self._nested(node, "_conditions")

    visit_IfExp = visit_If  # type: ignore[assignment]
    visit_Try = visit_If  # type: ignore[assignment]
    visit_Match = visit_If  # type: ignore[assignment]

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == self.step
        ):
            if func.attr == "do" and node.args:
                self.calls.append(self._do(node, node.args[0]))
            elif func.attr == "on" and len(node.args) >= 2:
                self.calls.append(self._on(node))
            elif func.attr == "wait" and node.args:
                self.waits.append(ast.unparse(node.args[0]))
            elif func.attr in ("wait_for", "wait_for_all", "wait_for_approval"):
                self.waits.append(_signal_wait(func.attr, node))
            elif func.attr in ("go_to", "finish", "fail"):
                target = node.args[0] if func.attr == "go_to" and node.args else None
                literal = isinstance(target, ast.Constant) and isinstance(target.value, str)
                decision = (func.attr, str(target.value) if literal else None)  # type: ignore[union-attr]
                if decision not in self.decisions:
                    self.decisions.append(decision)
        self.generic_visit(node)

    def _call(self, node: ast.Call, name: str | None, on: ast.expr | None) -> Call:
        return Call(
            name,
            ast.unparse(node),
            ast.unparse(on) if on is not None else None,
            self._loops > 0,
            self._conditions > 0,
            on is not None and self._is_actor(on),
        )

    def _is_actor(self, node: ast.expr) -> bool:
        """The step's own actor, alone or in a literal list of it."""
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return bool(node.elts) and all(self._is_actor(e) for e in node.elts)
        return isinstance(node, ast.Name) and node.id == self.actor

    def _do(self, node: ast.Call, target: ast.expr) -> Call:
        if isinstance(target, ast.Constant) and isinstance(target.value, str):
            return self._call(node, target.value, None)
        if isinstance(target, ast.Attribute):
            owner = target.value
            mine = isinstance(owner, ast.Name) and owner.id == self.actor
            return self._call(node, target.attr, None if mine else owner)
        return self._call(node, None, None)

    def _on(self, node: ast.Call) -> Call:
        actors, target = node.args[0], node.args[1]
        if isinstance(target, ast.Constant) and isinstance(target.value, str):
            return self._call(node, target.value, actors)
        if isinstance(target, ast.Attribute):
            return self._call(node, target.attr, actors)
        return self._call(node, None, actors)


def _signal_wait(kind: str, node: ast.Call) -> str:
    """A wait for signals as the catalog says it: "signal approved or rejected, 1 h"."""
    names = ["approved", "rejected"] if kind == "wait_for_approval" else [ast.unparse(a) for a in node.args]
    joiner = " and " if kind == "wait_for_all" else " or "
    timeout = next((ast.unparse(k.value) for k in node.keywords if k.arg == "timeout"), None)
    if kind == "wait_for_approval" and node.args and timeout is None:
        timeout = ast.unparse(node.args[0])
    shown = joiner.join(n.strip("'\"") for n in names)
    return f"signal {shown}" + (f" (timeout {timeout})" if timeout else "")


def source_of(fn: Callable[..., Any]) -> str:
    """A callable option as its source (a lambda) or its name (a function)."""
    code = getattr(fn, "__code__", None)
    if code is not None and code.co_name == "<lambda>":
        return _lambda_source(code)
    return f"{callable_name(fn)}(actor, *arguments)"


@lru_cache(maxsize=1024)
def _lambda_source(code: Any) -> str:
    try:
        lines, _ = inspect.getsourcelines(code)
    except (OSError, TypeError):
        return "a lambda"
    node = _lambda_node(textwrap.dedent("".join(lines)), code)
    if node is None:
        return "a lambda"
    text = ast.unparse(node)
    return text if len(text) <= SOURCE_SHOWN else text[: SOURCE_SHOWN - 1] + "…"


def callable_name(fn: Any) -> str:
    if fn is None:
        return "—"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return str(name).replace(".<locals>", "")


def names_in(tree: Tree) -> dict[int, str]:
    """Each step of the tree (id) with its name as declared, for the definitions this
    process knows (one lookup per distinct action name, not per step)."""
    shapes: dict[tuple[str, str], Declared | None] = {}
    names: dict[int, str] = {}
    for step in tree.steps.values():
        node = tree.nodes[step.action_id]
        key = (node.actor_type, node.name)
        if key not in shapes:
            shapes[key] = declared(*key)
        shape = shapes[key]
        name = shape.step(step.definition_index) if shape is not None else None
        if name is not None:
            names[step.id] = name
    return names
