"""Every table of the engine, imported in one place so the metadata is complete."""

from __future__ import annotations

from .achievement import Achievement
from .action import Action
from .attempt import Attempt
from .audit import AuditEntry
from .bulk_run import BulkRun
from .compensation import Compensation
from .counter import Counter
from .history import ActionEvent
from .invocation import Invocation
from .performance import Performance
from .schedules.tables import Schedule, Tick
from .signal import Signal
from .step import Step, step_actions

__all__ = [
    "Achievement",
    "Action",
    "ActionEvent",
    "Attempt",
    "AuditEntry",
    "BulkRun",
    "Compensation",
    "Counter",
    "Invocation",
    "Performance",
    "Schedule",
    "Signal",
    "Step",
    "Tick",
    "step_actions",
]
