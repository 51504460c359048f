"""Given a broker (Redis, then RabbitMQ) and one ``dramatiq engine.jobs`` worker process,
when it has booted, then its garbage collector holds the heap of its boot frozen and
collects its youngest generation every 10,000 net allocations, or every
``STEPWISE_GC_THRESHOLD`` (engine/worker_gc.py); ``STEPWISE_GC_THRESHOLD=0`` keeps
Python's collector as it is.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path

import dramatiq
import pytest
from sqlalchemy import MetaData

from engine import broker, worker_gc
from tests.integration.brokers import BrokerServer
from tests.integration.gc_report import REPORT_GC
from tests.integration.harness import WorkerGroup, fresh_database, running, wait_for, worker_env


@pytest.fixture(scope="module")
def database_url(broker_server: BrokerServer) -> Iterator[str]:
    with fresh_database(f"stepwise_worker_gc_{broker_server.key}", MetaData()) as url:
        yield url


def reported(
    setting: str | None, database_url: str, server: BrokerServer, client: dramatiq.Broker, tmp_path: Path
) -> dict[str, list[int]]:
    """What a worker process booted with ``STEPWISE_GC_THRESHOLD=setting`` (None: unset)
    reports of its collector."""
    env = worker_env(database_url, server)
    env.pop(worker_gc.THRESHOLD_VARIABLE, None)
    if setting is not None:
        env[worker_gc.THRESHOLD_VARIABLE] = setting
    group = WorkerGroup("tests.integration.gc_report", tmp_path / "workers.log", env, server, threads=1)
    report = tmp_path / "gc.json"
    with running(group):
        message = dramatiq.Message(
            queue_name=broker.QUEUE, actor_name=REPORT_GC, args=(str(report),), kwargs={}, options={}
        )
        client.enqueue(message)
        wait_for(report.exists, "the worker's report of its collector")
    return json.loads(report.read_text())  # type: ignore[no-any-return]


def test_a_worker_process_freezes_its_boot_heap_and_collects_less_often(
    database_url: str, broker_server: BrokerServer, broker_client: dramatiq.Broker, tmp_path: Path
) -> None:
    found = reported(None, database_url, broker_server, broker_client, tmp_path)
    assert found["threshold"] == [worker_gc.DEFAULT_THRESHOLD, *gc.get_threshold()[1:]]
    assert found["frozen"] > 10_000  # the modules, mappers and actors loaded at boot


def test_a_threshold_of_zero_keeps_pythons_collector(
    database_url: str, broker_server: BrokerServer, broker_client: dramatiq.Broker, tmp_path: Path
) -> None:
    found = reported("0", database_url, broker_server, broker_client, tmp_path)
    assert found == {"threshold": list(gc.get_threshold()), "frozen": 0}
