"""Stepwise: durable action trees on SQLAlchemy models, run by Dramatiq workers.

The public API, grouped as in the README.
"""

from __future__ import annotations

from . import commands, schedules, status
from .achievement import Achievement, checksum
from .achievement import forget as forget_achievement
from .action import Action
from .actor import Actor, BoundAction, action
from .completing import Completion
from .config import handling
from .db import Base, configure
from .db import session as new_session
from .definition import Definition, define, definition
from .errors import (
    ActorNotFound,
    ActorTypeTaken,
    ArgumentError,
    AttemptLost,
    AttemptTimedOut,
    Cancelled,
    ConfigurationError,
    Deadlock,
    DefinitionChanged,
    EngineError,
    Failed,
    HeartbeatTimedOut,
    InvalidTransition,
    LoopLimit,
    NoPendingActions,
    NotAnActor,
    SessionConflict,
    SignalRefused,
    Stalled,
    UnknownAction,
)
from .history import ActionEvent
from .invocation import Invocation
from .invoke import later, now
from .migrate import create_all, upgrade
from .outbound import complete, complete_action, complete_later
from .performance import Performance
from .recovery import Failure
from .registry import register_service
from .result import Child, result_of
from .retry import RetryPolicy
from .schedules import schedule
from .sending import approve, reject, signal
from .signal import Signal
from .step import Step
from .step_context import StepContext

__version__ = "0.1.0"

__all__ = [  # noqa: RUF022 - grouped by purpose
    # declaring
    "Actor",
    "action",
    "define",
    "definition",
    "Definition",
    "register_service",
    # invoking and completing
    "later",
    "now",
    "complete",
    "complete_action",
    "complete_later",
    "Completion",
    "result_of",
    "Child",
    "signal",
    "approve",
    "reject",
    "Signal",
    "forget_achievement",
    "checksum",
    "handling",
    "commands",
    "RetryPolicy",
    # schedules
    "schedule",
    "schedules",
    # database
    "Base",
    "configure",
    "new_session",
    "upgrade",
    "create_all",
    # models
    "Action",
    "Step",
    "StepContext",
    "Performance",
    "Achievement",
    "Invocation",
    "ActionEvent",
    "BoundAction",
    "status",
    # errors
    "EngineError",
    "ConfigurationError",
    "UnknownAction",
    "NotAnActor",
    "ActorNotFound",
    "ActorTypeTaken",
    "ArgumentError",
    "InvalidTransition",
    "Deadlock",
    "DefinitionChanged",
    "Stalled",
    "SessionConflict",
    "NoPendingActions",
    "Failed",
    "LoopLimit",
    "SignalRefused",
    "Cancelled",
    "AttemptTimedOut",
    "HeartbeatTimedOut",
    "AttemptLost",
    "Failure",
]
