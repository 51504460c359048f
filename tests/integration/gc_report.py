"""A worker module for tests/integration/test_a_worker_process_collects_garbage_less_often.py:
a job that writes what the worker process's garbage collector is set to."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import dramatiq

from engine import broker

REPORT_GC = "tests.report_gc"


@dramatiq.actor(actor_name=REPORT_GC, queue_name=broker.QUEUE, max_retries=0)
def report_gc(path: str) -> None:
    """Write the collector's thresholds and the count of frozen objects to ``path``."""
    written = Path(path).with_suffix(".tmp")
    written.write_text(json.dumps({"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}))
    written.replace(path)
