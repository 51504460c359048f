"""The catalog's read model: every registered definition as the shape the studio draws, its
steps in order, the child actions each step calls where they can be known, and its options
in words. It only reads the registry and the step functions' source.

The child actions are read from each step function's source (``inspect`` + ``ast``): calls
``step.do("name", ...)``, ``step.do(self.name, ...)`` and ``step.on(actors, "name", ...)``
with a literal name are known; any other name is "dynamic". Nothing is run.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import lru_cache
from typing import Any

from engine import registry
from engine.definition import Definition
from engine.retry import NO_RETRY, RetryPolicy

from .views import duration

#: Longest source text shown for a key or checksum callable.
SOURCE_SHOWN = 120


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


@dataclass
class Child:
    """A call, with the definition it starts when the registry knows it."""

    call: Call
    definition: Definition | None = None
    #: "declared": a registered definition; "method": a plain method, a one-step action
    #: declared on first use; "unknown": no such action on the actor class (or another actor).
    kind: str = "unknown"

    @property
    def anchor(self) -> str | None:
        return anchor(self.definition) if self.definition is not None else None


@dataclass
class StepShape:
    number: int
    label: str
    #: "step", "prepended", "method" (calls a method), "job" (enqueues a Dramatiq job).
    kind: str
    doc: str | None = None
    children: list[Child] = field(default_factory=list)
    waits: list[str] = field(default_factory=list)
    #: The source could not be read (a builtin, a function made at run time).
    unknown: bool = False
    where: str | None = None

    @property
    def dynamic(self) -> bool:
        return any(child.call.name is None for child in self.children)


@dataclass
class Shape:
    definition: Definition
    actor_type: str
    name: str
    anchor: str
    doc: str | None
    steps: list[StepShape]
    options: list[tuple[str, str]]
    callbacks: list[tuple[str, str]]
    before: str | None


def definitions() -> list[Definition]:
    """Every registered definition, by actor type then name."""
    return sorted(registry.definitions(), key=lambda d: (registry.type_name(d.actor_class), d.name))


def shapes() -> list[Shape]:
    return [shape(d) for d in definitions()]


def find(actor_type: str, name: str) -> Definition | None:
    cls = registry.actor_classes().get(actor_type)
    return registry.find(cls, name) if cls is not None else None


def anchor(definition: Definition) -> str:
    """The id of a definition's diagram on the catalog page."""
    return "def-" + re.sub(
        r"[^A-Za-z0-9_-]", "-", f"{registry.type_name(definition.actor_class)}-{definition.name}"
    )


def shape(definition: Definition) -> Shape:
    return Shape(
        definition=definition,
        actor_type=registry.type_name(definition.actor_class),
        name=definition.name,
        anchor=anchor(definition),
        doc=first_line(_body_doc(definition)),
        steps=steps(definition),
        options=options(definition),
        callbacks=[(when, callable_name(fn)) for when, fn in definition.callbacks],
        before=callable_name(definition.before_hook) if definition.before_hook is not None else None,
    )


def _body_doc(definition: Definition) -> str | None:
    body = definition.steps[0] if definition.steps else definition.method
    if body is None:
        body = getattr(definition.actor_class, definition.name, None)
    return inspect.getdoc(body) if body is not None and not isinstance(body, type) else None


# --- steps ----------------------------------------------------------------------------------


def steps(definition: Definition) -> list[StepShape]:
    shapes: list[StepShape] = []
    for fn in definition.prepended:
        shapes.append(_step_shape(definition, fn, len(shapes) + 1, "prepended"))
    for fn in definition.steps:
        shapes.append(_step_shape(definition, fn, len(shapes) + 1, "step"))
    if not definition.steps:
        number = len(shapes) + 1
        if definition.job is not None:
            job = getattr(definition.job, "actor_name", None) or callable_name(definition.job)
            shapes.append(
                StepShape(number, f"job {job}", "job", doc="enqueues the job; the job completes the action")
            )
        else:
            method = definition.method or getattr(definition.actor_class, definition.name, None)
            label = callable_name(method) if method is not None else f"{definition.name} (missing)"
            shapes.append(
                StepShape(
                    number,
                    label,
                    "method",
                    doc="calls the method with the action's arguments",
                    where=where(method),
                )
            )
    return shapes


def _step_shape(definition: Definition, fn: Callable[..., Any], number: int, kind: str) -> StepShape:
    found = step_calls(fn)
    shape = StepShape(
        number,
        getattr(fn, "__name__", None) or callable_name(fn),
        kind,
        doc=first_line(inspect.getdoc(fn)) if fn.__name__ != "<lambda>" else None,
        unknown=found is None,
        where=where(fn),
    )
    if found is not None:
        calls, shape.waits = found
        shape.children = [resolve(definition, call) for call in calls]
    return shape


def resolve(definition: Definition, call: Call) -> Child:
    """The definition a call starts: on the step's own actor class, or, for another actor,
    the one definition of that name in the registry when there is exactly one."""
    if call.name is None:
        return Child(call)
    if call.on is None or call.own_actor:
        found = registry.find(definition.actor_class, call.name)
        if found is not None:
            return Child(call, found, "declared")
        if callable(getattr(definition.actor_class, call.name, None)):
            return Child(call, None, "method")
        return Child(call)
    named = [d for d in registry.definitions() if d.name == call.name]
    if len(named) == 1:
        return Child(call, named[0], "declared")
    return Child(call)


def step_calls(fn: Callable[..., Any]) -> tuple[list[Call], list[str]] | None:
    """The child actions and waits a step function's source starts, or None when its source
    cannot be read."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    return _step_calls(code)


@lru_cache(maxsize=1024)
def _step_calls(code: Any) -> tuple[list[Call], list[str]] | None:
    node = _function_node(code)
    if node is None:
        return None
    params = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
    if len(params) < 2:
        return [], []
    finder = _CallFinder(actor=params[0], step=params[1])
    for statement in node.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else [node.body]:
        finder.visit(statement)
    return finder.calls, finder.waits


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


# --- options --------------------------------------------------------------------------------


def options(definition: Definition) -> list[tuple[str, str]]:
    """The definition's options, in words, in the order the diagram shows them."""
    tenancy = f"{registry.type_name(definition.actor_class)}/<actor id>/{definition.name}"
    job = definition.job
    return [
        ("Lane key", key_option(definition.concurrency_key, f"{tenancy} (its own lane per actor)")),
        ("Checksum", key_option(definition.checksum, "none (never skipped)")),
        ("Checksum key", key_option(definition.checksum_key, tenancy)),
        ("Timeout", timeout_option(definition.timeout)),
        (
            "Outbound",
            "yes: completed from outside (a webhook, an operator, engine.complete)"
            if definition.outbound
            else "no",
        ),
        ("Job", getattr(job, "actor_name", None) or callable_name(job) if job is not None else "none"),
        ("Retry", retry_option(definition.retry)),
    ]


def key_option(option: Any, default: str) -> str:
    if option is None or option == "" or option == [] or option == ():
        return default
    if isinstance(option, str):
        return repr(option)
    if isinstance(option, list | tuple):
        return repr("/".join(str(part) for part in option))
    if isinstance(option, property):
        return f"property {callable_name(option.fget) if option.fget else '?'}"
    if callable(option):
        return source_of(option)
    return repr(option)


def timeout_option(option: Any) -> str:
    if option is None:
        return "none"
    if isinstance(option, timedelta):
        return duration(option)
    if isinstance(option, int | float):
        return duration(float(option))
    if isinstance(option, str):
        return f"the actor's {option}"
    return source_of(option)


def retry_option(policy: RetryPolicy) -> str:
    if policy == NO_RETRY or policy.max_attempts == 1:
        return "none: a failing step fails at once"
    text = (
        f"{policy.max_attempts} attempts, {duration(policy.initial_interval)} apart at first, then "
        f"{policy.backoff:g} times longer each time, up to {duration(policy.max_interval)}"
    )
    if policy.jitter:
        text += f", ±{policy.jitter:.0%}"
    if policy.non_retryable:
        text += "; never for " + ", ".join(cls.__name__ for cls in policy.non_retryable)
    return text


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


# --- naming ---------------------------------------------------------------------------------


def callable_name(fn: Any) -> str:
    if fn is None:
        return "—"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return str(name).replace(".<locals>", "")


def where(fn: Any) -> str | None:
    """``module.py:12``: where a function is defined."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    return f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"


def first_line(text: str | None) -> str | None:
    return text.strip().splitlines()[0] if text and text.strip() else None


def arguments_problem(definition: Definition, arguments: Sequence[Any]) -> str | None:
    """Why ``arguments`` do not fit the action's steps (each step is called with the actor,
    the step and the arguments; a one-step method with the actor and the arguments), or None."""
    for step in definition.all_steps():
        fn: Any = step
        leading: tuple[Any, ...] = (None, None)
        if getattr(step, "__func__", None) is Definition.default_step:
            if definition.job is not None:
                continue
            fn = definition.method or getattr(definition.actor_class, definition.name, None)
            leading = (None,)
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            continue
        try:
            signature.bind(*leading, *arguments)
        except TypeError as error:
            shown = list(signature.parameters.values())[len(leading) :]
            return f"{definition.name} takes ({', '.join(parameter_text(p) for p in shown)}): {error}"
    return None


def parameter_text(parameter: inspect.Parameter) -> str:
    """``miles``, ``*colors``, ``city='Paris'``: a parameter without its annotation."""
    if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
        return f"*{parameter.name}"
    if parameter.kind is inspect.Parameter.VAR_KEYWORD:
        return f"**{parameter.name}"
    if parameter.default is not inspect.Parameter.empty:
        return f"{parameter.name}={parameter.default!r}"
    return parameter.name


def actor_types() -> list[str]:
    """The actor types actions may be started on, by name."""
    return sorted(registry.actor_classes())


def names_for(actor_type: str) -> Sequence[str]:
    cls = registry.actor_classes().get(actor_type)
    return sorted(
        d.name for d in registry.definitions() if cls is not None and issubclass(cls, d.actor_class)
    )
