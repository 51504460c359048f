"""The client CPU of one SQL statement on this machine, by the layer that sends it: the
bound on the engine's worker CPU per action (statements per action x cost of one).

    .venv/bin/python bench/statement_cost.py [--runs 2000]

On a fresh PostgreSQL database with the engine's tables, one process and one thread, times
(``time.process_time``) an ORM insert-and-flush of a step, a Core INSERT … RETURNING of the
same row, an ORM load of an action, a Core SELECT of two columns, and psycopg's own cursor
running the same SELECT (two columns, and every column). Each is rolled back; nothing is
kept. See bench/README.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import bindparam, insert, select

from bench import common
from bench.figures import table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args(argv)
    import engine
    from engine import db
    from engine.models import Action, Step

    rows: list[tuple[str, ...]] = []
    with common.fresh_database("stepwise_statements") as url:
        common.create_schema(url)
        engine.configure(url, pool_size=1)
        with db.session() as session:
            action = Action(actor_type="T", actor_id="1", name="n", concurrency_key="k", checksum_key="k")
            session.add(action)
            session.commit()
            action_id = action.id
        steps = Step.__table__
        core_insert = insert(steps).returning(steps.c.id)
        actions = Action.__table__
        core_select = select(actions.c.id, actions.c.status).where(actions.c.id == bindparam("i"))
        orm_select = (
            select(Action).where(Action.id == bindparam("i")).execution_options(populate_existing=True)
        )
        visit = iter(range(1, 10**9))

        def step_values() -> dict[str, Any]:
            return {
                "action_id": action_id,
                "definition_index": 0,
                "visit": next(visit),
                "status": "performing",
            }

        def orm_insert(session: Any) -> None:
            session.add(Step(**step_values(), pending_actions_count=0, unsuccessful_actions_count=0))
            session.flush()

        def core_insert_row(session: Any) -> None:
            session.connection().execute(core_insert, step_values()).scalar()

        def orm_load(session: Any) -> None:
            session.scalars(orm_select, {"i": action_id}).one()

        def core_load(session: Any) -> None:
            session.connection().execute(core_select, {"i": action_id}).first()

        def raw(sql: str) -> Callable[[Any], None]:
            def run(session: Any) -> None:
                cursor = session.connection().connection.driver_connection.cursor()
                cursor.execute(sql, (action_id,))
                cursor.fetchone()

            return run

        cases = [
            ("ORM add + flush (INSERT … RETURNING)", orm_insert),
            ("Core INSERT … RETURNING", core_insert_row),
            ("ORM load of an action (every column)", orm_load),
            ("Core SELECT of 2 columns", core_load),
            ("psycopg SELECT of 2 columns", raw("SELECT id, status FROM stepwise_actions WHERE id = %s")),
            ("psycopg SELECT * (every column)", raw("SELECT * FROM stepwise_actions WHERE id = %s")),
        ]
        for label, case in cases:
            with db.session() as session:
                for _ in range(50):
                    case(session)
                started = time.process_time()
                for _ in range(args.runs):
                    case(session)
                spent = time.process_time() - started
                session.rollback()
            rows.append((label, f"{spent / args.runs * 1000:.3f} ms", "client CPU per statement"))
    table(f"Statement cost, one process and one thread ({common.machine()})", rows)


if __name__ == "__main__":
    main()
