"""A schedule's rule: a cron expression (parsed by cronsim, never by hand) or a fixed
interval, in an explicit time zone; the instants it fires at, as naive UTC like the clock.

Cron fields are read in the schedule's time zone, so ``0 9 * * *`` in Europe/Paris fires at
07:00 UTC in summer and 08:00 UTC in winter; a time skipped by a DST change fires at the
next valid time, a repeated one fires once. Intervals are aligned to the Unix epoch (every
hour fires on the hour, UTC), so every clock process computes the same ticks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..errors import EngineError

#: The time zone of a schedule that names none.
DEFAULT_TIMEZONE = "UTC"
#: The longest cron expression accepted (the column's width).
MAX_CRON = 200
#: Shorthands, spelled out as the five fields they stand for (cronsim reads those).
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
EPOCH = datetime(1970, 1, 1)


class ScheduleError(EngineError):
    """Raised when a schedule cannot be made or changed as asked; ``field`` names the input
    at fault (``cron``, ``timezone``, ``actor_type`` …) and the message says how to fix it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (``Europe/Paris``), or a ScheduleError naming it."""
    if not name or len(name) > 64 or "\x00" in name or name.startswith(("/", ".")) or ".." in name:
        raise ScheduleError(
            "timezone", f"unknown time zone {name[:80]!r}: use an IANA name like Europe/Paris"
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(
            "timezone", f"unknown time zone {name[:80]!r}: use an IANA name like Europe/Paris or UTC"
        ) from None


def naive_utc(instant: datetime) -> datetime:
    return instant.astimezone(UTC).replace(tzinfo=None)


@dataclass(frozen=True)
class Rule:
    """When a schedule fires: ``cron`` (5 fields, or 6 with seconds first) or ``every``."""

    cron: str | None
    every: timedelta | None
    timezone: str = DEFAULT_TIMEZONE

    @classmethod
    def of(cls, cron: str | None, every: timedelta | float | None, timezone: str | None) -> Rule:
        """A checked rule; a ScheduleError names the field that is wrong."""
        tz = timezone or DEFAULT_TIMEZONE
        zone(tz)
        if isinstance(every, (int, float)):
            every = timedelta(seconds=every)
        cron = cron.strip() if cron else None
        if (cron is None) == (every is None):
            raise ScheduleError(
                "cron", "give a schedule either a cron expression or an interval (every), not both"
            )
        if every is not None:
            if every < timedelta(seconds=1) or every.total_seconds() != int(every.total_seconds()):
                raise ScheduleError("every", "an interval is a whole number of seconds, at least 1")
            if every > timedelta(days=3660):
                raise ScheduleError("every", "an interval is at most ten years")
            return cls(None, every, tz)
        assert cron is not None
        if len(cron) > MAX_CRON or "\x00" in cron:
            raise ScheduleError("cron", f"a cron expression is at most {MAX_CRON} characters")
        rule = cls(cron, None, tz)
        try:
            first = rule.after(datetime(2000, 1, 1))
        except CronSimError as error:
            raise ScheduleError(
                "cron",
                f"{cron!r} is not a cron expression ({error}): use five fields, minute hour day month "
                "weekday, like '0 2 * * *' (or six, seconds first)",
            ) from None
        if first is None:
            raise ScheduleError("cron", f"{cron!r} never fires (no such date)")
        return rule

    @property
    def expression(self) -> str | None:
        return ALIASES.get(self.cron.lower(), self.cron) if self.cron else None

    def after(self, instant: datetime) -> datetime | None:
        """The first tick strictly after ``instant`` (naive UTC), None if there is none."""
        if self.every is not None:
            step = self.every.total_seconds()
            elapsed = (instant - EPOCH).total_seconds()
            return EPOCH + timedelta(seconds=(elapsed // step + 1) * step)
        assert self.expression is not None
        start = instant.replace(tzinfo=UTC).astimezone(zone(self.timezone))
        try:
            return naive_utc(next(iter(CronSim(self.expression, start))))
        except StopIteration:
            return None

    def upcoming(self, instant: datetime, count: int = 3) -> list[datetime]:
        """The next ``count`` ticks after ``instant``."""
        found: list[datetime] = []
        tick: datetime | None = instant
        while len(found) < count and tick is not None:
            tick = self.after(tick)
            if tick is not None:
                found.append(tick)
        return found

    def due(self, first: datetime, now: datetime, cap: int = 10_000) -> tuple[int, datetime]:
        """The ticks from ``first`` (itself a tick, <= now) to ``now``: how many (a cron
        rule counts up to ``cap``) and the latest one."""
        if self.every is not None:
            step = self.every.total_seconds()
            count = int((now - first).total_seconds() // step) + 1
            return count, first + timedelta(seconds=(count - 1) * step)
        assert self.expression is not None
        count, latest = 1, first
        ticks = iter(CronSim(self.expression, first.replace(tzinfo=UTC).astimezone(zone(self.timezone))))
        for tick in ticks:
            instant = naive_utc(tick)
            if instant > now:
                return count, latest
            count, latest = count + 1, instant
            if count >= cap:
                break
        back = CronSim(self.expression, now.replace(tzinfo=UTC).astimezone(zone(self.timezone)), reverse=True)
        latest = max(latest, naive_utc(next(iter(back))))
        return count, latest

    def describe(self) -> str:
        """The rule in words: "Every day at 02:00 (Europe/Paris)", "Every 5 minutes"."""
        if self.every is not None:
            return f"Every {spell(self.every)}"
        assert self.expression is not None
        try:
            words = str(CronSim(self.expression, datetime(2000, 1, 1)).explain())
        except Exception:  # cronsim explains the common forms; the expression itself is shown too
            words = f"Cron {self.cron}"
        return f"{words} ({self.timezone})"


def spell(every: timedelta) -> str:
    seconds = int(every.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            n = seconds // size
            return unit if n == 1 else f"{n} {unit}s"
    return "second" if seconds == 1 else f"{seconds} seconds"
