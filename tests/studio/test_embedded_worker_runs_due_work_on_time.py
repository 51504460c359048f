"""Given the embedded runtime of ``stepwise serve`` (the in-memory broker and an in-process
worker), delayed work that is due runs on time, even while many far-off timers wait.

Not a spec case: the embedded default of issue 4. Dramatiq's stub broker declares its delay
queue among its ordinary queues; a worker started after the queues were declared consumed
it with the ordinary prefetch (2 per thread), so a few outbound timeouts due in minutes held
back every due retry until the sweeper sent it again, 30 seconds late.
"""

from __future__ import annotations

import time
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

import engine
from app.embedded import Embedded
from engine import RetryPolicy, testing
from engine.models import Action
from tests.domain import Car


def order_paint(car: Car, color: str) -> None:
    """The paint shop is asked; it completes the action from outside (here: never)."""


def statuses(name: str) -> list[str]:
    with engine.new_session() as fresh:
        return list(fresh.scalars(select(Action.status).where(Action.name == name)))


def wait_for(check: object, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"not true after {seconds}s: {check}")


def test_due_retries_run_on_time_while_far_off_timeouts_wait(session: Session, car: Car) -> None:
    # Given the embedded worker, and six outbound actions whose timeouts are 10 minutes away
    engine.define(
        Car,
        "paint",
        order_paint,
        outbound=True,
        timeout=timedelta(minutes=10),
        concurrency_key=lambda car, color: ["paint", color],
    )
    attempts: list[float] = []

    def flaky(car: Car) -> None:
        attempts.append(time.monotonic())
        if len(attempts) < 3:
            raise RuntimeError("flaky")

    engine.define(
        Car,
        "flaky",
        flaky,
        retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(seconds=0.2), jitter=0),
    )
    runtime = Embedded(worker_threads=2, sweep_every=3600)
    with testing.handle_exceptions():
        runtime.start()
        try:
            for color in ("red", "green", "blue", "black", "white", "silver"):
                engine.later(car, "paint", color)
            session.commit()
            wait_for(lambda: statuses("paint").count("performing") == 6, 10)

            # When an action fails twice, with a retry policy of 0.2 s then 0.4 s
            engine.later(car, "flaky")
            session.commit()

            # Then its retries run when due, not when the sweeper notices them
            wait_for(lambda: statuses("flaky") == ["succeeded"], 10)
        finally:
            runtime.stop()
    assert len(attempts) == 3
    assert attempts[2] - attempts[0] < 5
