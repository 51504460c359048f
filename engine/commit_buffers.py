"""What a transaction keeps for its commit: the lists in ``session.info`` that history
events and after-commit callbacks (broker messages) fill, and that a rolled-back SAVEPOINT
cuts back to where they stood when it began, so that a retried attempt
(``db.retrying`` in a caller's session) leaves none of its events or messages behind.
"""

from __future__ import annotations

from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction

#: ``session.info`` keys of the lists a transaction fills for its commit: history events,
#: after-commit callbacks (broker messages). Each module that keeps one adds its key here.
COMMIT_BUFFERS: set[str] = set()
_SAVEPOINT_MARKS = "stepwise.savepoint_marks"


@event.listens_for(Session, "after_transaction_create")
def _mark_savepoint(session: Session, transaction: SessionTransaction) -> None:
    if transaction.nested:
        marks = session.info.setdefault(_SAVEPOINT_MARKS, {})
        marks[transaction] = {key: len(session.info.get(key) or ()) for key in COMMIT_BUFFERS}


@event.listens_for(Session, "after_rollback")
def _cut_back_to_savepoint(session: Session) -> None:
    """A SAVEPOINT rolled back: what was kept for the commit since it began goes with it
    (a retried attempt must not leave its events or messages behind). The root rollback
    is each buffer's own business: it drops them whole."""
    savepoint = session.get_nested_transaction()
    mark = session.info.get(_SAVEPOINT_MARKS, {}).get(savepoint) if savepoint is not None else None
    for key, length in (mark or {}).items():
        kept = session.info.get(key)
        if kept is not None:
            del kept[length:]


@event.listens_for(Session, "after_transaction_end")
def _unmark_savepoint(session: Session, transaction: SessionTransaction) -> None:
    if transaction.nested:
        session.info.get(_SAVEPOINT_MARKS, {}).pop(transaction, None)


def in_savepoint(session: Session) -> bool:
    """Whether the transaction now committing is a SAVEPOINT being released (SQLAlchemy
    sends ``before_commit`` and ``after_commit`` for those too): what waits for the commit
    waits for the root's."""
    return session.in_nested_transaction()
