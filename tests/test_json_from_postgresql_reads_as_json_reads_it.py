"""On PostgreSQL the engine's connections read JSON values (arguments, results, history
data) with orjson, which is faster than the ``json`` module, but they get the same values
``json.loads`` gives. orjson reads an integer past 64 bits as a float, and it refuses a
lone surrogate and a number past a double's range. Those documents are read by ``json``."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from engine import db
from engine.pg_connection import json_loads

pytestmark = pytest.mark.postgresql_only

DOCUMENTS = [
    '{"order": 42, "items": [1, 2.5, null, true, "x"]}',
    "123456789012345678901234567890",
    '{"amount": 18446744073709551616, "small": -9223372036854775809}',
    '"\\ud800"',
    "1e400",
    '{"a": 1, "a": 2}',
    '"caf\\u00e9 \\u2603"',
    "[]",
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_a_json_value_read_from_postgresql_is_what_json_loads_makes_of_it(
    backend: object, document: str
) -> None:
    # The engine's columns are PostgreSQL's json (SQLAlchemy's JSON), kept as written.
    with db.session() as session:
        value = session.execute(text("SELECT CAST(:document AS json)"), {"document": document}).scalar_one()
    expected = json.loads(document)
    assert value == expected and type(value) is type(expected)
    if isinstance(expected, dict) and "amount" in expected:
        assert value["amount"] == 2**64 and value["small"] == -(2**63) - 1


def test_an_integer_past_64_bits_keeps_every_digit() -> None:
    assert json_loads(b"[123456789012345678901234567890]") == [123456789012345678901234567890]
    assert json_loads(b'{"n": 18446744073709551616}') == {"n": 2**64}


def test_a_document_json_refuses_fails_as_json_fails() -> None:
    with pytest.raises(json.JSONDecodeError):
        json_loads(b"{not json")
