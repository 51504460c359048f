"""Operator commands: cancel, retry, skip, signal, approve/reject/complete, forget, and the bulk forms.

The studio, the CLI and the webhook endpoint all call these. Each records who did it, when
and why: one audit entry per command, and a history entry per transition it causes. Step
bodies they make ready are sent to workers, never run in the caller (a web request).
"""

from __future__ import annotations

from . import bulk as bulk_module
from .bulk import ActionFilter, bulk
from .cancel import cancel
from .completion import approve, complete, forget, reject
from .result import CommandResult
from .retry import retry
from .signal import signal
from .skip import skip

__all__ = [
    "ActionFilter",
    "CommandResult",
    "approve",
    "bulk",
    "bulk_module",
    "cancel",
    "complete",
    "forget",
    "reject",
    "retry",
    "signal",
    "skip",
]
