"""Actors: the objects actions run on, and ``@action``, which declares an action in an
actor's class body.

``car.visit`` is a bound action: ``car.visit.later(...)``, ``car.visit.now(...)``, and for
a one-step action ``car.visit(...)`` still calls the plain method.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, overload

from . import registry, status
from .definition import Definition, KeyOption, TimeoutOption, own
from .invoke import later, now
from .outbound import complete, complete_later
from .retry import RetryPolicy

if TYPE_CHECKING:
    from .action import Action
    from .completing import Completion
    from .invocation import Invocation


class Actor:
    """Optional mixin for actor classes: registers the class by name as soon as it is
    defined (so workers resolve stored references) and adds ``tenancy_key``."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        registry.add_actor_class(cls)

    def tenancy_key(self, name: str) -> str:
        actor_type, actor_id = registry.actor_ref(self)
        return f"{actor_type}/{actor_id}/{name}"


class BoundAction:
    """An action of one actor, ready to invoke."""

    def __init__(self, actor: Any, name: str, method: Callable[..., Any] | None) -> None:
        self.actor = actor
        self.name = name
        self.__name__ = name
        self._method = method

    def __repr__(self) -> str:
        return f"<BoundAction {type(self.actor).__name__}.{self.name}>"

    def later(self, *args: Any) -> Invocation:
        return later(self.actor, self.name, *args)

    def now(self, *args: Any) -> Action:
        return now(self.actor, self.name, *args)

    def complete(self, to: str = status.SUCCEEDED, **options: Any) -> Completion:
        return complete(self.actor, self.name, to, **options)

    def complete_later(self, to: str = status.SUCCEEDED) -> None:
        complete_later(self.actor, self.name, to)

    def __call__(self, *args: Any) -> Any:
        if self._method is None:
            raise TypeError(f"{self.name} is a multi-step action: run it with .now(...) or .later(...)")
        return self._method(self.actor, *args)


class ActionDescriptor:
    """What ``@action`` leaves in the class body. Its decorators (``.step``, ``.before``,
    ``.after``, ``.succeeded`` …) add to the definition."""

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]) -> None:
        self.definition = Definition(object, fn.__name__, **options).body(fn)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __set_name__(self, owner: type, name: str) -> None:
        self.definition.actor_class = owner
        self.definition.name = name
        registry.add(self.definition)

    @overload
    def __get__(self, obj: None, owner: type) -> Any: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> BoundAction: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> Any:
        if obj is None:
            if owner is None or owner is self.definition.actor_class:
                return self
            return InheritedAction(owner, self.definition.name)
        return BoundAction(obj, self.definition.name, self.definition.method)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.__dict__["definition"], attr)


class InheritedAction:
    """A subclass's view of an inherited action: changing it copies the definition to the
    subclass first, leaving the parent's unchanged."""

    def __init__(self, owner: type, name: str) -> None:
        self.owner = owner
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(own(self.owner, self.name), attr)


@overload
def action(fn: Callable[..., Any], /) -> Any: ...
@overload
def action(
    *,
    outbound: bool = ...,
    timeout: TimeoutOption = ...,
    concurrency_key: KeyOption = ...,
    checksum: KeyOption = ...,
    checksum_key: KeyOption = ...,
    job: Any = ...,
    retry: RetryPolicy | int | None = ...,
    heartbeat_timeout: timedelta | float | None = ...,
    attempt_timeout: timedelta | float | None = ...,
    recover: str | None = ...,
) -> Callable[[Callable[..., Any]], Any]: ...


def action(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Declare an action on an actor class.

    A method whose first parameter after ``self`` is ``step`` is the action's first step;
    any other method is the body of a one-step action."""
    if fn is not None:
        return ActionDescriptor(fn, options)
    return lambda f: ActionDescriptor(f, options)
