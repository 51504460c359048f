"""The actions list's filter: its URL parameters, how they are read and checked, and the
``engine.commands.ActionFilter`` they make (the same filter the bulk commands act on).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from engine import commands, status

#: The filter's URL parameters, in the order the form shows them.
FIELDS = (
    "status",
    "name",
    "actor_type",
    "actor_id",
    "concurrency_key",
    "roots",
    "created_after",
    "created_before",
    "q",
)
#: ActionFilter's field for each URL parameter.
FILTER_FIELDS = {
    "status": "status",
    "name": "name",
    "actor_type": "actor_type",
    "actor_id": "actor_id",
    "concurrency_key": "concurrency_key",
    "roots": "roots_only",
    "created_after": "created_after",
    "created_before": "created_before",
    "q": "search",
}
TRUE = {"1", "on", "true", "yes"}
MAX_LENGTH = 255


@dataclass
class Filters:
    """A filter read from a query string (or a form): the values as the form shows them,
    the ``ActionFilter`` they make, and what was wrong with them."""

    values: dict[str, str] = field(default_factory=dict)
    where: commands.ActionFilter = field(default_factory=commands.ActionFilter)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return bool(self.values)

    def params(self, **extra: Any) -> dict[str, Any]:
        """URL parameters of this filter (for url_for), plus ``extra``."""
        return {**self.values, **{k: v for k, v in extra.items() if v is not None}}

    def query_string(self, **extra: Any) -> str:
        return urlencode(self.params(**extra))

    def described(self) -> list[tuple[str, str]]:
        """The filter in words, for the confirmation: (label, value) pairs."""
        labels = {
            "status": "status",
            "name": "action name",
            "actor_type": "actor type",
            "actor_id": "actor id",
            "concurrency_key": "lane",
            "roots": "roots only",
            "created_after": "created at or after (UTC)",
            "created_before": "created before (UTC)",
            "q": "arguments contain",
        }
        return [(labels[k], "yes" if k == "roots" else self.values[k]) for k in FIELDS if k in self.values]


def parse_time(text: str) -> datetime:
    """``2025-01-31``, ``2025-01-31T14:05`` (a datetime-local input), with seconds or an
    offset; naive times are UTC, like the engine's."""
    value = datetime.fromisoformat(text.replace(" ", "T", 1) if "T" not in text else text)
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


def format_time(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%S" if value.second or value.microsecond else "%Y-%m-%dT%H:%M")


def parse_filters(args: Mapping[str, str]) -> Filters:
    """Read the filter's parameters from ``args``; empty ones are no filter."""
    values: dict[str, str] = {}
    errors: dict[str, str] = {}
    found: dict[str, Any] = {}
    for name in FIELDS:
        raw = (args.get(name) or "").strip()
        if not raw:
            continue
        if name == "roots":
            if raw.lower() in TRUE:
                values[name], found["roots_only"] = "1", True
            continue
        if len(raw) > MAX_LENGTH:
            errors[name] = f"At most {MAX_LENGTH} characters."
            values[name] = raw[:MAX_LENGTH]
            continue
        if name == "status" and raw not in status.ACTION_STATUSES:
            errors[name] = f"Unknown status {raw!r}: use one of {', '.join(status.ACTION_STATUSES)}."
            values[name] = raw
            continue
        if name in ("created_after", "created_before"):
            try:
                moment = parse_time(raw)
            except ValueError:
                errors[name] = (
                    f"Not a date and time: {raw!r}. Write it as 2025-01-31 or 2025-01-31T14:05 (UTC)."
                )
                values[name] = raw
                continue
            values[name], found[FILTER_FIELDS[name]] = format_time(moment), moment
            continue
        values[name], found[FILTER_FIELDS[name]] = raw, raw
    where = commands.ActionFilter(**found) if not errors else commands.ActionFilter()
    return Filters(values, where, errors)
