"""Retry policies: how often a failing step body is tried again, and when.

Each failed attempt is recorded in the action's history with its error and the time of
the next attempt; when the attempts are exhausted the step fails, as in Stepped.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import timedelta


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` counts the first try. The n-th retry waits
    ``initial_interval * backoff ** (n - 1)``, at most ``max_interval``, varied by
    ``± jitter`` (a fraction). Errors of ``non_retryable`` classes fail at once."""

    max_attempts: int = 3
    initial_interval: timedelta = timedelta(seconds=1)
    backoff: float = 2.0
    max_interval: timedelta = timedelta(minutes=5)
    jitter: float = 0.1
    non_retryable: tuple[type[BaseException], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts counts the first try: it must be at least 1")
        if self.backoff < 1:
            raise ValueError("backoff must be at least 1")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter is a fraction between 0 and 1")

    def retries(self, error: BaseException, attempt: int) -> bool:
        """Whether attempt number ``attempt`` (1 = the first try), which raised ``error``,
        is followed by another."""
        return attempt < self.max_attempts and not isinstance(error, self.non_retryable)

    def interval(self, attempt: int, rng: random.Random | None = None) -> timedelta:
        """How long to wait after failed attempt number ``attempt``."""
        base = self.initial_interval.total_seconds() * self.backoff ** (attempt - 1)
        capped = min(base, self.max_interval.total_seconds())
        spread = capped * self.jitter
        varied = capped + (rng or random).uniform(-spread, spread) if spread else capped
        return timedelta(seconds=max(0.0, varied))


NO_RETRY = RetryPolicy(max_attempts=1)


def policy(option: RetryPolicy | int | None) -> RetryPolicy:
    """``retry=`` accepts a policy, or a number of attempts with the default backoff."""
    if option is None:
        return NO_RETRY
    if isinstance(option, int):
        return RetryPolicy(max_attempts=option)
    return option
