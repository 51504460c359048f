"""Retry policies: how often a failing step body is tried again, and when.

Each failed attempt is recorded in the action's history with its error and the time of
the next attempt; when the attempts are exhausted the step fails, as in Stepped. An
operator's retry starts a new run of attempts with the whole budget again.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import timedelta


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` counts the first try. The n-th retry waits
    ``initial_interval * backoff ** (n - 1)``, at most ``max_interval``, varied by
    ``± jitter`` (a fraction). Errors of ``non_retryable`` classes fail at once.

    Attempt numbers grow across an operator's retries, so each attempt keeps its own
    idempotency key; a retry starts the next *run* of ``max_attempts`` numbers
    (``next_run``), and the budget and the backoff count within the run (``in_run``):
    with 4 attempts, run 1 is attempts 1-4, run 2 attempts 5-8. No column stores where a
    run started: the numbering is the record."""

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
        return self.in_run(attempt) < self.max_attempts and not isinstance(error, self.non_retryable)

    def interval(self, attempt: int, rng: random.Random | None = None) -> timedelta:
        """How long to wait after failed attempt number ``attempt``."""
        base = self.initial_interval.total_seconds() * self.backoff ** (self.in_run(attempt) - 1)
        capped = min(base, self.max_interval.total_seconds())
        spread = capped * self.jitter
        varied = capped + (rng or random).uniform(-spread, spread) if spread else capped
        return timedelta(seconds=max(0.0, varied))

    def in_run(self, attempt: int) -> int:
        """Which try of its run attempt number ``attempt`` is (1 = the run's first)."""
        return (attempt - 1) % self.max_attempts + 1

    def next_run(self, attempt: int) -> int:
        """The first attempt number of the run after the one ``attempt`` belongs to: where
        an operator's retry starts, with a fresh budget (attempt 4 of 4 -> attempt 5;
        attempt 1 of 3, failed at once -> attempt 4)."""
        return (attempt - 1) // self.max_attempts * self.max_attempts + self.max_attempts + 1


NO_RETRY = RetryPolicy(max_attempts=1)


def policy(option: RetryPolicy | int | None) -> RetryPolicy:
    """``retry=`` accepts a policy, or a number of attempts with the default backoff."""
    if option is None:
        return NO_RETRY
    if isinstance(option, int):
        return RetryPolicy(max_attempts=option)
    return option
