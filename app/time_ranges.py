"""The time-range presets of the lists (the last 15 minutes, hour, day, week) and how the
URL names them (``window=1h``): relative, so a bookmark or a refresh always means "the last
hour from now", resolved against the engine's clock at each request.

A custom range is the filter's own from/to (``created_after`` / ``created_before``); a
preset and a custom range together are refused, naming the field, never guessed between.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from engine import clock

#: The URL parameter of a preset.
FIELD = "window"
#: What the form's "Custom" choice sends: the from/to fields, not a preset.
CUSTOM = "custom"


@dataclass(frozen=True)
class Preset:
    key: str
    #: The preset's button ("1 h") and the list's sentence ("the last hour").
    label: str
    words: str
    span: timedelta

    def since(self, now: datetime | None = None) -> datetime:
        """The earliest creation time this preset keeps, from ``now`` (the engine's clock)."""
        return (now or clock.now()) - self.span


PRESETS = {
    p.key: p
    for p in (
        Preset("15m", "15 min", "the last 15 minutes", timedelta(minutes=15)),
        Preset("1h", "1 h", "the last hour", timedelta(hours=1)),
        Preset("24h", "24 h", "the last 24 hours", timedelta(hours=24)),
        Preset("7d", "7 d", "the last 7 days", timedelta(days=7)),
    )
}


def parse(raw: str, *, custom: bool) -> tuple[Preset | None, str | None]:
    """The preset ``raw`` names (none for "" or "custom"), and what is wrong with it;
    ``custom`` says whether a from/to was given too."""
    if raw in ("", CUSTOM):
        return None, None
    preset = PRESETS.get(raw)
    if preset is None:
        known = ", ".join(PRESETS)
        return None, (
            f"Unknown time range {raw[:40]!r}: use one of {known}, or {CUSTOM} with a from/to "
            "(created_after, created_before)."
        )
    if custom:
        return None, (
            f"The preset {raw} and a custom from/to were both given: choose Custom to keep the "
            "from/to, or clear them to keep the preset."
        )
    return preset, None
