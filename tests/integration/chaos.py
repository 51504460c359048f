"""The chaos driver: it feeds orders of ``chaos_workload.py`` to three worker groups while it
kills a random worker with SIGKILL every few seconds, restarts the broker once (Redis loses
every message it held; on either broker the orders invoked while it is down cannot be sent),
and completes the outbound shipments from outside, as a carrier's webhook would. The sweeper
runs beside them as production's clock process would, sending again what a kill or the
restart lost. What must hold afterwards is checked by the test.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

import engine
from engine import history, status
from engine.models import Action, ActionEvent, Step
from tests.integration.brokers import BrokerServer
from tests.integration.chaos_workload import (
    LOST_EVERY,
    PARCELS_PER_ORDER,
    SHIPPED_EVERY,
    ChaosInterval,
    Order,
    Parcel,
)
from tests.integration.harness import ROOT, WorkerGroup, stop_group, tail, wait_until_ready, worker_env
from tests.integration.intervals import peak_parallelism
from tests.integration.progress import diagnosis, progress

#: Orders invoked but not yet ended, at most: the queue stays shorter than the sweeper's
#: grace, so the sweeper re-sends what was lost rather than what is merely waiting.
IN_FLIGHT = 120
WORKERS = 3
THREADS = 4
#: A random worker is killed every KILL_EVERY seconds, give or take a second.
KILL_EVERY = 3.0
SWEEP_EVERY = 1.0
GRACE_SECONDS = 3.0
#: Measured on a shared 2-core machine: 76-180 s on Redis and 119-204 s on RabbitMQ (whose
#: restart keeps it down ~11 s, and its consumers reconnect 3 s later), the slower figures at
#: a load average of 8-9 from other runs. The deadline only bounds how long a stuck run takes
#: to fail.
DEADLINE_SECONDS = 360.0


@dataclass
class ChaosWorker(WorkerGroup):
    """One ``dramatiq engine.jobs tests.integration.chaos_workload -p 1`` process group."""

    slot: int = 0
    #: Exits we did not cause: (return code, the log's last lines).
    exits: list[tuple[int, str]] = field(default_factory=list)

    def worker_pid(self) -> int | None:
        """The pid of the Dramatiq worker process (the one running jobs), a child of the
        main process; None while it is being forked."""
        assert self.process is not None
        path = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        try:
            children = path.read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def kill(self) -> str:
        """SIGKILL the worker process in the middle of whatever it does. Dramatiq's main
        process then stops and exits ("Worker with PID … exited unexpectedly"); it is
        restarted at once, as a supervisor would. Returns what was killed."""
        assert self.process is not None
        pid = self.worker_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed = f"worker process {pid}"
        else:
            os.killpg(self.process.pid, signal.SIGKILL)
            killed = f"process group {self.process.pid} (still booting)"
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.start()
        return killed

    def restart_if_exited(self) -> None:
        assert self.process is not None
        code = self.process.poll()
        if code is not None:
            self.exits.append((code, self.tail(15)))
            self.start()


@dataclass
class Chaos:
    """The worker groups, the sweeper, and what was done to them."""

    workers: list[ChaosWorker]
    sweeper: subprocess.Popen[bytes] | None
    sweeper_log: Path
    server: BrokerServer
    kills: list[str] = field(default_factory=list)
    broker_down_seconds: float | None = None
    completions: Counter[str] = field(default_factory=Counter)
    orders: int = 0

    def check_processes(self) -> None:
        """Restart a worker group that exited without being killed (recorded, and failed
        at the end); fail at once if the sweeper exited."""
        for worker in self.workers:
            worker.restart_if_exited()
        assert self.sweeper is not None
        if self.sweeper.poll() is not None:
            pytest.fail(f"the sweeper exited with {self.sweeper.returncode}:\n{tail(self.sweeper_log)}")

    def diagnosis(self, session: Session) -> str:
        return (
            f"{diagnosis(session, self.workers, lines=25)}\nkills: {len(self.kills)}; "
            f"exits we did not cause: {[(w.slot, code) for w in self.workers for code, _ in w.exits]}\n"
            f"--- sweeper ({self.sweeper_log}):\n{tail(self.sweeper_log, 10)}"
        )

    def report(self, seconds: float, session: Session) -> None:
        statuses = Counter(session.scalars(select(Action.status)))
        recovered = Counter(
            event.data["job"]
            for event in session.scalars(select(ActionEvent).where(ActionEvent.event == "recovered"))
        )
        retried = session.scalar(select(func.count()).where(ActionEvent.event == "attempt_failed"))
        peak = peak_parallelism(session, ChaosInterval)
        print(
            f"\nchaos: {self.orders} trees, {sum(statuses.values())} actions ({dict(statuses)}) "
            f"ended in {seconds:.1f} s on {WORKERS} workers x {THREADS} threads "
            f"(at most {peak} performing at once, counting those waiting on children)\n"
            f"  {len(self.kills)} workers killed with SIGKILL, "
            f"{sum(w.starts for w in self.workers) - WORKERS} restarts; "
            f"{self.server.name} down {self.broker_down_seconds or 0:.1f} s\n"
            f"  the sweeper sent {sum(recovered.values())} messages again: {dict(recovered)}\n"
            f"  the completer completed {dict(self.completions)} shipments; {retried} label attempts "
            f"failed and were retried"
        )


@contextlib.contextmanager
def unleashed(database_url: str, server: BrokerServer, logs: Path) -> Iterator[Chaos]:
    """Three worker groups and the sweeper, all stopped at the end whatever happened; the
    broker is left running."""
    env = worker_env(database_url, server)
    workers = [
        ChaosWorker(
            "tests.integration.chaos_workload", logs / f"worker-{n}.log", env, server, threads=THREADS, slot=n
        )
        for n in range(WORKERS)
    ]
    running = Chaos(workers, None, logs / "sweeper.log", server)
    sweep = ["sweep", "--every", str(SWEEP_EVERY), "--grace", str(GRACE_SECONDS)]
    try:
        for worker in running.workers:
            worker.start()
        with running.sweeper_log.open("wb") as output:
            running.sweeper = subprocess.Popen(
                [sys.executable, "-m", "engine.cli", *sweep],
                cwd=ROOT,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until_ready(running.workers)
        yield running
    finally:
        for worker in running.workers:
            worker.stop(seconds=15)
        if running.sweeper is not None:
            stop_group(running.sweeper, seconds=5)
        if not server.ready():
            server.start()
        print(f"\nchaos logs: {logs}")


# --- the orders -----------------------------------------------------------------------


def given_orders(count: int) -> list[int]:
    with engine.new_session() as session:
        orders = [
            Order(
                number=n,
                parcels=[
                    Parcel(number=p, outbound=p % SHIPPED_EVERY == 0)
                    for p in range(n * PARCELS_PER_ORDER, (n + 1) * PARCELS_PER_ORDER)
                ],
            )
            for n in range(count)
        ]
        session.add_all(orders)
        session.commit()
        return [order.id for order in orders]


def fulfil(order_ids: list[int]) -> None:
    """Invoke the orders in one transaction; their admissions go to the broker after commit
    (or, if it is down, are lost and left to the sweeper)."""
    with engine.new_session() as session:
        for order in session.scalars(select(Order).where(Order.id.in_(order_ids)).order_by(Order.id)):
            engine.later(order, "fulfil", order.number)
        session.commit()


def complete_shipments(chaos: Chaos, parcel_numbers: dict[str, int], limit: int = 60) -> None:
    """The carrier's webhook: complete the shipments awaiting completion (their step has
    concluded), every LOST_EVERY-th parcel's as failed."""
    with engine.new_session() as session:
        awaiting = session.execute(
            select(Action.id, Action.actor_id)
            .join(
                Step,
                (Step.action_id == Action.id) & (Step.definition_index == Action.current_step_index),
            )
            .where(Action.name == "ship", Action.status == status.PERFORMING, Step.completed_at.is_not(None))
            .order_by(Action.id)
            .limit(limit)
        ).all()
    for action_id, parcel_id in awaiting:
        to = status.FAILED if parcel_numbers[parcel_id] % LOST_EVERY == 0 else status.SUCCEEDED
        done = engine.complete_action(action_id, to, cause=history.WEBHOOK, by="chaos completer")
        chaos.completions[to if done else done.reason] += 1


# --- the chaos ------------------------------------------------------------------------


def run_the_chaos(chaos: Chaos, order_ids: list[int]) -> float:
    """Feed the orders (at most IN_FLIGHT unfinished), complete the shipments, kill a
    random worker every few seconds and restart the broker once, halfway, until every tree
    has ended. Returns the seconds it took; fails with a diagnosis at the deadline."""
    chaos.orders = orders = len(order_ids)
    with engine.new_session() as session:
        rows = session.execute(select(Parcel.id, Parcel.number))
        parcel_numbers = {str(parcel_id): number for parcel_id, number in rows}
    rng = random.Random()
    started = time.monotonic()
    next_kill = started + rng.uniform(KILL_EVERY - 1, KILL_EVERY + 1)
    fed = 0
    with engine.new_session() as session:
        while True:
            now = time.monotonic()
            current = progress(session)
            session.rollback()
            if fed == orders and current.settled(orders):
                return now - started
            if now - started > DEADLINE_SECONDS:
                pytest.fail(
                    f"not every tree ended in {DEADLINE_SECONDS:.0f} s: fed {fed}, {current}\n"
                    f"{chaos.diagnosis(session)}"
                )
            if fed < orders and fed - current.roots_ended < IN_FLIGHT:
                batch = order_ids[fed : fed + min(IN_FLIGHT - (fed - current.roots_ended), 40)]
                fulfil(batch)
                fed += len(batch)
            if chaos.broker_down_seconds is None and fed >= orders // 2:
                fed += restart_broker(chaos, order_ids[fed : fed + 10])
            if now >= next_kill:
                chaos.kills.append(rng.choice(chaos.workers).kill())
                next_kill = now + rng.uniform(KILL_EVERY - 1, KILL_EVERY + 1)
            chaos.check_processes()
            complete_shipments(chaos, parcel_numbers)
            time.sleep(0.1)


def restart_broker(chaos: Chaos, order_ids: list[int]) -> int:
    """Stop the broker (Redis loses every message it held), fulfil ``order_ids`` while it is
    down (their admissions cannot be sent), and start it again. Returns how many were fed."""
    # Every worker connected first: one still booting would exit on the refused connection
    # (Dramatiq's exit status 3), which is not what this tests.
    wait_until_ready(chaos.workers)
    down = time.monotonic()
    chaos.server.stop()
    fulfil(order_ids)
    chaos.server.start()
    chaos.broker_down_seconds = time.monotonic() - down
    return len(order_ids)
