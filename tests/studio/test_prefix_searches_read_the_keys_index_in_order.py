"""A prefix search of the achievements (and of the lanes) reads its page from the unique
index of the key, in key order, however many keys start with the prefix: the range
``key >= p AND key < p + U+10FFFF`` with an exact check that each key starts with ``p``.

On PostgreSQL that check was ``substr(key, 1, n) = p``, which the planner estimates at
0.5% of the range whatever the prefix: with 20,000 achievements under "Tree/1" (11,112 of
them) it read the whole table and sorted it (a Seq Scan and a Sort, 15 to 30 ms, and
growing with the table) instead of the first 51 entries of the index (0.05 ms).
``starts_with(key, p)`` is as exact and estimated from the column's statistics.

Not a spec case: the studio is ours (issue 12, "every page under 150 ms at a million actions").
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.orm import Session

from app.achievements import queries as queries_achievements

pytestmark = pytest.mark.postgresql_only

KEYS = 20_000


def test_a_broad_prefix_reads_the_first_entries_of_the_keys_index(session: Session) -> None:
    # Given 20,000 achievements, more than half of them under the prefix "Tree/1"
    session.execute(
        text(
            "INSERT INTO stepwise_achievements (checksum_key, checksum, action_id, created_at, updated_at) "
            "SELECT 'Tree/' || n, md5(n::text), n, now(), now() FROM generate_series(1, :keys) AS n"
        ),
        {"keys": KEYS},
    )
    session.commit()
    session.execute(text("ANALYZE stepwise_achievements"))
    session.commit()

    # When the list is searched by that prefix
    sent: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: Any) -> None:
        if "FROM stepwise_achievements" in statement and "ORDER BY" in statement:
            sent.append((statement, parameters))

    bind = session.get_bind()
    event.listen(bind, "before_cursor_execute", record)
    try:
        page = queries_achievements.search(session, q="Tree/1")
    finally:
        event.remove(bind, "before_cursor_execute", record)

    # Then the page holds the first keys under it, in key order
    assert [row.key for row in page.rows][:3] == ["Tree/1", "Tree/10", "Tree/100"]
    assert len(page.rows) == queries_achievements.PAGE and page.next_after is not None
    assert all(row.key.startswith("Tree/1") for row in page.rows)

    # And it was read from the index in key order: no scan of the table, no sort
    ((statement, parameters),) = sent
    raw = session.connection().connection.dbapi_connection
    assert raw is not None
    with raw.cursor() as cursor:
        cursor.execute("EXPLAIN " + statement, parameters)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Scan" in plan, plan
    assert "Seq Scan" not in plan and "Sort" not in plan, plan


def test_a_prefix_is_matched_exactly(session: Session) -> None:
    # Given keys that a collation might sort between a prefix and its end
    session.execute(
        text(
            "INSERT INTO stepwise_achievements (checksum_key, checksum, action_id, created_at, updated_at) "
            "SELECT key, 'x', n, now(), now() "
            "FROM unnest(ARRAY['ab', 'a-b', 'AB', 'ab%', 'abc', 'a_b']) WITH ORDINALITY AS k (key, n)"
        )
    )
    session.commit()

    # Then a prefix finds only the keys that start with it, byte for byte
    assert [row.key for row in queries_achievements.search(session, q="ab").rows] == ["ab", "ab%", "abc"]
    assert [row.key for row in queries_achievements.search(session, q="a_").rows] == ["a_b"]
    assert [row.key for row in queries_achievements.search(session, q="ab%").rows] == ["ab%"]
