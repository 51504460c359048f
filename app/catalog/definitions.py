"""The catalog's read model: every registered definition as the shape the studio draws, its
steps in order, the child actions each step calls where they can be known, and its options
in words. It only reads the registry and the step functions' source.

The child actions are read from each step function's source (``inspect`` + ``ast``): calls
``step.do("name", ...)``, ``step.do(self.name, ...)`` and ``step.on(actors, "name", ...)``
with a literal name are known; any other name is "dynamic". Nothing is run.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from engine import registry
from engine.attempt import options_of as attempt_options
from engine.definition import Definition
from engine.retry import NO_RETRY, RetryPolicy

from ..action.step_source import Call, callable_name, source_of, step_calls
from ..views import duration


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
    #: The decisions its source can take (see ``step_source.Found``): the diagram's edges
    #: to other steps than the next one.
    decisions: list[tuple[str, str | None]] = field(default_factory=list)
    #: The source could not be read (a builtin, a function made at run time).
    unknown: bool = False
    where: str | None = None
    #: Its durable-attempt options in words (heartbeat and attempt timeouts), and the step
    #: it recovers to once its retries are exhausted.
    attempts: str | None = None
    recover: str | None = None

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
    for index, shape in enumerate(shapes):
        declared = attempt_options(definition, index)
        if declared is not None:
            shape.recover = declared.recover
            words = [
                f"{label} {duration(value)}"
                for label, value in (
                    ("heartbeat timeout", declared.heartbeat_timeout),
                    ("attempt timeout", declared.attempt_timeout),
                )
                if value is not None
            ]
            shape.attempts = " · ".join(words) or None
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
        shape.waits = found.waits
        shape.children = [resolve(definition, call) for call in found.calls]
        shape.decisions = found.decisions
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


# --- naming ---------------------------------------------------------------------------------


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
