"""Configuration of how the engine treats errors raised by user code.

``handle_exceptions`` lists the exception classes that fail a step or an action instead of
propagating to the worker: all exceptions by default, none under ``engine.testing``.
``count`` reads a worker process's counts from the environment.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: Exception classes that are handled: stored on the action and in its history, and the
#: step or action fails. Anything else propagates to Dramatiq (and the transaction rolls back).
handle_exceptions: tuple[type[BaseException], ...] = (Exception,)


#: Whether a worker admits the children a step body starts in its own process (no broker
#: round trip; the invocation row stays the outbox). ``engine.testing`` turns it off, so
#: that tests drain one message at a time, as Stepped's test helper does.
admit_children_here: bool = True


def handles(error: BaseException) -> bool:
    return isinstance(error, Exception) and isinstance(error, handle_exceptions)


def run_user_code(fn: Callable[..., Any], *args: Any) -> BaseException | None:
    """Call ``fn``; return the handled exception it raised, or None. Unhandled ones propagate."""
    return call_user_code(fn, *args)[1]


def call_user_code(fn: Callable[..., Any], *args: Any) -> tuple[Any, BaseException | None]:
    """Call ``fn``: what it returned and None, or None and the handled exception it
    raised. Unhandled ones propagate."""
    try:
        return fn(*args), None
    except Exception as error:
        if handles(error):
            return None, error
        raise


@contextmanager
def handling(*classes: type[BaseException]) -> Iterator[None]:
    """Handle ``classes`` (default: every Exception) inside the block, then restore."""
    global handle_exceptions
    saved = handle_exceptions
    handle_exceptions = classes or (Exception,)
    try:
        yield
    finally:
        handle_exceptions = saved


def count(variable: str, default: int) -> int:
    """The whole number ``variable`` holds in the environment (0 or more), ``default`` when
    it is unset or blank; a clear error naming it otherwise."""
    value = os.environ.get(variable, "").strip()
    if not value:
        return default
    try:
        found = int(value)
    except ValueError:
        raise ValueError(f"{variable} must be a whole number, not {value!r}") from None
    if found < 0:
        raise ValueError(f"{variable} must be 0 or more, not {found}")
    return found
