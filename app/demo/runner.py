"""The demo's seeding thread: ``stepwise serve --demo`` runs a ``Demo`` that starts new
deployments, orders and reports (``app.demo``) every few seconds, bounded by how many are in
flight, and plays the DNS provider's webhook.
"""

from __future__ import annotations

import logging
import random
import threading
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

import engine
from engine import clock, history, status
from engine.models import Action

from . import APPS, CUSTOMERS, PERIODS, REPORTS, Deployment, Order, Report

log = logging.getLogger("stepwise.demo")


class ExpectedFailures(logging.Filter):
    """The demo's failures are part of the show (a launch with no capacity, a busy renderer):
    the engine's line for them is logged at INFO, not as a warning that looks like a real
    error; hidden where INFO is (``stepwise serve`` logs warnings and up)."""

    ERRORS = (
        "app.demo.LaunchFailed",
        "app.demo.WarehouseUnavailable",
        "app.demo.RendererBusy",
        "app.demo.CarrierRefused",
        "app.demo.RefundRefused",
    )

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        data = record.args[-1] if isinstance(record.args, tuple) and record.args else None
        if not isinstance(data, dict) or data.get("error_class") not in self.ERRORS:
            return True
        record.levelno, record.levelname = logging.INFO, "INFO"
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)


EXPECTED_FAILURES = ExpectedFailures()


ROOTS = ("deploy", "fulfil", "publish")


class Demo:
    """Starts a new workflow every ``every`` seconds while fewer than ``in_flight`` demo
    roots are pending or performing (at most ``limit`` in all, if given), and plays the DNS
    provider's webhook."""

    def __init__(
        self,
        *,
        every: float = 2.0,
        in_flight: int = 12,
        waiting_orders: int = 4,
        limit: int | None = None,
        seed: int | None = None,
    ) -> None:
        self.every = every
        self.in_flight = in_flight
        self.waiting_orders = waiting_orders
        self.limit = limit
        self.started = 0
        self.rng = random.Random(seed)
        self._turn = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        history_log = logging.getLogger("stepwise")
        if EXPECTED_FAILURES not in history_log.filters:
            history_log.addFilter(EXPECTED_FAILURES)
        self._thread = threading.Thread(target=self._run, name="stepwise-demo", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        logging.getLogger("stepwise").removeFilter(EXPECTED_FAILURES)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # a locked database, a restart: the next tick tries again
                log.exception("stepwise demo: a tick failed")
            self._stop.wait(self.every)

    def tick(self) -> None:
        with engine.new_session() as session:
            self.answer_dns(session)
        with engine.new_session() as session:
            if self.limit is not None and self.started >= self.limit:
                return
            if roots_in_flight(session, self.in_flight) < self.in_flight:
                self.start_one(session)

    def start_one(self, session: Session) -> None:
        kinds = ["deployment", "report", "order", "deployment", "report"]
        kind = kinds[self._turn % len(kinds)]
        self._turn += 1
        if kind == "order" and orders_waiting(session, self.waiting_orders) >= self.waiting_orders:
            kind = "deployment"
        actor: Any
        if kind == "deployment":
            app_name = self.rng.choice(APPS)
            version = 1 + (
                session.scalar(select(func.max(Deployment.version)).where(Deployment.app_name == app_name))
                or 0
            )
            hostname = (
                f"{app_name}.example.com" if self.rng.random() < 0.5 else f"v{version}.{app_name}.example.com"
            )
            actor = Deployment(
                app_name=app_name, version=version, hostname=hostname, instances=self.rng.randint(2, 4)
            )
            name = "deploy"
        elif kind == "order":
            actor = Order(customer=self.rng.choice(CUSTOMERS), amount_cents=self.rng.randint(500, 90_000))
            name = "fulfil"
        else:
            actor = Report(name=self.rng.choice(REPORTS), period=self.rng.choice(PERIODS))
            name = "publish"
        session.add(actor)
        session.flush()
        engine.later(actor, name)
        session.commit()
        self.started += 1

    def answer_dns(self, session: Session) -> None:
        """The DNS provider's webhook: each record is live 2 to 6 seconds after it was asked
        for, except for deployments whose id is a multiple of 4 (an operator approves them)."""
        now = clock.now()
        waiting = session.scalars(
            select(Action)
            .where(
                Action.status == status.PERFORMING,
                Action.name == "provision_dns",
                Action.actor_type == "Deployment",
                Action.started_at < now - timedelta(seconds=2),
            )
            .order_by(Action.id)
            .limit(20)
        ).all()
        for dns in waiting:
            deployment_id = int(dns.actor_id)
            delay = timedelta(seconds=2 + deployment_id * 7919 % 5)
            if deployment_id % 4 == 0 or dns.started_at is None or dns.started_at + delay > now:
                continue
            deployment = session.get(Deployment, deployment_id)
            if deployment is not None:
                engine.complete(
                    deployment,
                    "provision_dns",
                    cause=history.WEBHOOK,
                    by="demo DNS provider",
                    note=f"the record for {deployment.hostname} is live",
                )


def roots_in_flight(session: Session, cap: int) -> int:
    """Demo roots pending or performing, counted up to ``cap``."""
    query = (
        select(Action.id)
        .where(Action.status.in_(status.INCOMPLETE), Action.root.is_(True), Action.name.in_(ROOTS))
        .limit(cap)
    )
    return session.scalar(select(func.count()).select_from(query.subquery())) or 0


def orders_waiting(session: Session, cap: int) -> int:
    """Orders in flight (some wait for their review), counted up to ``cap``."""
    query = select(Action.id).where(Action.status == status.PERFORMING, Action.name == "fulfil").limit(cap)
    return session.scalar(select(func.count()).select_from(query.subquery())) or 0
