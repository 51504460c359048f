"""The result of an operator command, and the one way commands run their transaction."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from .. import db
from ..step_body import dispatch_ready


@dataclass
class CommandResult:
    """Falsy when the command changed nothing; ``reason`` says why (``already_completed``,
    ``not_found``, ``not_retryable``, ``not_outbound`` …) or what it did."""

    ok: bool
    reason: str
    action_id: int | None = None

    def __bool__(self) -> bool:
        return self.ok


def run(session: Session | None, work: Callable[[Session], CommandResult]) -> CommandResult:
    """Run ``work`` in one transaction (retried on deadlock), then send the step bodies it
    made ready to the workers. In the caller's ``session``, their changes are committed
    with the command's, and never lost to a retry (``db.retrying``)."""
    own = session is None
    s = session if session is not None else db.session()
    try:
        result = db.retrying(s, lambda: work(s), callers_session=not own)
        dispatch_ready(s)
        return result
    finally:
        if own:
            s.close()
