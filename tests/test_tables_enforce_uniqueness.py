"""Given the engine's tables, when a row would break one of their unique indexes, then the
database refuses it: one achievement per checksum_key, one lane per action, one lane per
concurrency_key (while lanes without a key may be many)."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

import engine
from engine import registry
from engine.definition import find_or_add
from engine.models import Achievement, Action, Performance
from tests.conftest import Counts
from tests.domain import Account


@pytest.fixture
def account(session: Session) -> Account:
    """An account with the action ``fly`` declared (its method does nothing)."""
    engine.define(Account, "fly")
    new = Account(name="Acme Org")
    session.add(new)
    session.commit()
    return new


def create_action(session: Session, account: Account) -> Action:
    """A saved, pending ``fly`` action keyed as its definition says (Stepped's
    ``Action.new(actor:, name: "fly").tap(&:apply_definition).tap(&:save!)``)."""
    definition = find_or_add(Account, "fly")
    actor_type, actor_id = registry.actor_ref(account)
    action = Action(actor_type=actor_type, actor_id=actor_id, name="fly", outbound=definition.outbound)
    tenancy = definition.tenancy_key(action)
    action.concurrency_key = definition.key(definition.concurrency_key, account, [], tenancy)
    action.checksum_key = definition.key(definition.checksum_key, account, [], tenancy)
    session.add(action)
    session.commit()
    return action


def test_checksum_key_must_be_unique(session: Session, counts: Counts) -> None:
    """Spec §8 case 6: a second achievement under the same checksum_key is refused, even
    with a different checksum. (The engine itself grants with an upsert on this index,
    DESIGN invariant 6; the index is what makes "one achievement per key" hold.)"""
    # Given an achievement under "one"
    session.add(Achievement(checksum_key="one", checksum="1"))
    session.commit()
    assert counts.delta()["achievements"] == +1

    # When another one under "one" is inserted, then the database refuses it
    session.add(Achievement(checksum_key="one", checksum="2"))
    with pytest.raises(IntegrityError):
        session.flush()
    session.rollback()

    assert counts.delta()["achievements"] == 0


def test_only_one_performance_of_an_action_can_exist_at_a_time(
    session: Session, account: Account, counts: Counts
) -> None:
    """Spec §8 case 7: a second lane whose current action is the same action is refused
    (unique index on ``stepwise_performances.action_id``)."""
    # Given an action that is the current action of a lane
    action = create_action(session, account)
    counts.delta()
    session.add(Performance(action_id=action.id))
    session.commit()
    assert counts.delta()["performances"] == +1

    # When a second lane names the same action, then the database refuses it
    session.add(Performance(action_id=action.id))
    with pytest.raises(IntegrityError):
        session.flush()
    session.rollback()

    assert counts.delta()["performances"] == 0


def test_a_lane_must_have_no_concurrency_key_or_a_unique_one(
    session: Session, account: Account, counts: Counts
) -> None:
    """Spec §8 case 8: lanes without a concurrency_key (NULL) may be many; a keyed lane is
    unique (unique index on ``stepwise_performances.concurrency_key``)."""
    # Given two lanes without a key and one with the key "a"
    for key in (None, None, "a"):
        session.add(Performance(action_id=create_action(session, account).id, concurrency_key=key))
        session.commit()
    assert counts.delta()["performances"] == +3

    # When a second lane with the key "a" is inserted, then the database refuses it
    session.add(Performance(action_id=create_action(session, account).id, concurrency_key="a"))
    with pytest.raises(IntegrityError):
        session.flush()
    session.rollback()

    assert counts.delta()["performances"] == 0
