"""A worker embedded in another process (the studio's, a test's) leaves that process's
garbage collector as it is and keeps no pool of local runs; only a process the
``dramatiq`` command booted is tuned (engine/worker_process.py;
tests/integration/test_a_worker_process_collects_garbage_less_often.py boots one). A
malformed ``STEPWISE_GC_THRESHOLD`` is refused with a message naming it."""

from __future__ import annotations

import gc

import pytest
from dramatiq import Worker
from dramatiq.brokers.stub import StubBroker

from engine import broker as engine_broker
from engine import local_runs, worker_gc
from engine.worker_process import WorkerProcess


def test_an_embedded_worker_leaves_the_collector_alone_and_keeps_no_pool() -> None:
    before = gc.get_threshold(), gc.get_freeze_count()
    broker = StubBroker()
    broker.add_middleware(WorkerProcess(local_job=engine_broker.PERFORM_STEP))
    worker = Worker(broker, worker_threads=1)
    worker.start()
    assert local_runs.pool.free() == 0 and not local_runs.pool.submit(lambda: None)
    worker.stop()
    broker.close()
    assert (gc.get_threshold(), gc.get_freeze_count()) == before


@pytest.mark.parametrize(("setting", "expected"), [("", 10_000), (" 50000 ", 50_000), ("0", 0)])
def test_the_threshold_comes_from_the_environment(
    setting: str, expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(worker_gc.THRESHOLD_VARIABLE, setting)
    assert worker_gc.threshold() == expected


@pytest.mark.parametrize("setting", ["many", "1e4", "-1"])
def test_a_malformed_threshold_is_refused_by_name(setting: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(worker_gc.THRESHOLD_VARIABLE, setting)
    with pytest.raises(ValueError, match=worker_gc.THRESHOLD_VARIABLE):
        worker_gc.threshold()
