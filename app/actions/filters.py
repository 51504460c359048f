"""The actions list's filter: its URL parameters, how they are read and checked, and the
``engine.commands.ActionFilter`` they make (the same filter the bulk commands act on).

The studio also filters by an error class, outbound actions and a selection of ids:
``engine.bulk_work.BulkFilter`` adds them to the engine's ``ActionFilter`` (a bulk run reads
them back in a worker), and is made only when one is asked for, so every other filter is
the engine's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from engine import bulk_work, commands, status

from .. import time_ranges

#: The filter's URL parameters, in the order the form shows them.
FIELDS = (
    "status",
    "name",
    "actor_type",
    "actor_id",
    "concurrency_key",
    "roots",
    "window",
    "created_after",
    "created_before",
    "q",
    "error",
    "outbound",
    "ids",
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
    "error": "error_class",
    "outbound": "outbound_only",
    "ids": "ids",
}
TRUE = {"1", "on", "true", "yes"}
MAX_LENGTH = 255
#: The most ids a selection (``ids``) may name: a few pages of the list.
MAX_IDS = 500
#: Statuses whose list shows the roots of their trees unless asked otherwise: a failure
#: fails the tree above it, so each failed tree would be listed once per level.
ROOTS_BY_DEFAULT = frozenset({status.FAILED, status.TIMED_OUT})
#: The studio's own fields (StudioFilter's beyond the engine's ActionFilter).
STUDIO_FIELDS = ("error_class", "outbound_only", "ids")


#: The engine's ActionFilter with the studio's fields: what a bulk run acts on, too.
StudioFilter = bulk_work.BulkFilter


def make_filter(**fields: Any) -> commands.ActionFilter:
    """The engine's ActionFilter, or a StudioFilter when one of its own fields is set."""
    if any(fields.get(name) for name in STUDIO_FIELDS):
        return StudioFilter(**fields)
    return commands.ActionFilter(**{k: v for k, v in fields.items() if k not in STUDIO_FIELDS})


def roots_by_default(state: str | None, *, error: str | None = None, ids: str | None = None) -> bool:
    """Whether a list of ``state`` shows roots unless asked otherwise: failures do, except
    those of one error class (the actions that raised it) or a selection of ids."""
    return state in ROOTS_BY_DEFAULT and not error and not ids


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

    def with_roots(self, wanted: bool) -> dict[str, Any]:
        """URL parameters of this filter listing roots only (``wanted``) or every level."""
        params = {k: v for k, v in self.values.items() if k != "roots"}
        if wanted != self.roots_default:
            params["roots"] = "1" if wanted else "0"
        return params

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
            "window": "created in",
            "created_after": "created at or after (UTC)",
            "created_before": "created before (UTC)",
            "q": "arguments contain",
            "error": "error class",
            "outbound": "outbound only",
            "ids": "selected ids",
        }
        shown = {"roots": "yes" if self.roots_only else "no, leaves included", "outbound": "yes"}
        if self.preset is not None and self.where.created_after is not None:
            shown["window"] = f"{self.preset.words} (from {self.where.created_after:%Y-%m-%d %H:%M:%S} UTC)"
        return [(labels[k], shown.get(k, self.values[k])) for k in FIELDS if k in self.values]

    @property
    def preset(self) -> time_ranges.Preset | None:
        """The time-range preset in force (``window=1h``), if any."""
        return time_ranges.PRESETS.get(self.values.get(time_ranges.FIELD, "")) if not self.errors else None

    @property
    def time_range(self) -> str:
        """Which choice of the form's time range is on: a preset's key, "custom" (a from/to),
        or "" (any time)."""
        if self.values.get(time_ranges.FIELD):
            return self.values[time_ranges.FIELD]
        if "created_after" in self.values or "created_before" in self.values:
            return time_ranges.CUSTOM
        return ""

    def pinned(self) -> dict[str, str]:
        """This filter's values with a preset made absolute (``window=1h`` becomes the
        ``created_after`` it meant now): what a bulk command acts on is what was counted,
        not a window that has moved on by the time it is confirmed."""
        values = dict(self.values)
        if values.pop(time_ranges.FIELD, None) and self.where.created_after is not None:
            values["created_after"] = format_time(self.where.created_after)
        return values

    @property
    def roots_only(self) -> bool:
        return bool(self.where.roots_only)

    @property
    def roots_default(self) -> bool:
        """Whether this filter's status lists roots unless asked otherwise (failures)."""
        return roots_by_default(
            self.values.get("status"), error=self.values.get("error"), ids=self.values.get("ids")
        )

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(getattr(self.where, "ids", ()) or ())


def parse_time(text: str) -> datetime:
    """``2025-01-31``, ``2025-01-31T14:05`` (a datetime-local input), with seconds or an
    offset; naive times are UTC, like the engine's."""
    value = datetime.fromisoformat(text.replace(" ", "T", 1) if "T" not in text else text)
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


def format_time(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%S" if value.second or value.microsecond else "%Y-%m-%dT%H:%M")


def parse_ids(args: Mapping[str, str]) -> tuple[tuple[int, ...], str | None]:
    """The ids of ``ids`` (repeated, as ticked checkboxes send them, or comma-separated, as a
    link carries them), in order, once each; and what is wrong with them."""
    getlist = getattr(args, "getlist", None)
    raws = getlist("ids") if getlist is not None else [args.get("ids") or ""]
    found: dict[int, None] = {}
    for raw in raws:
        for part in str(raw).split(","):
            part = part.strip()
            if not part:
                continue
            if not (part.isascii() and part.isdigit()) or int(part) >= 2**63:
                return (), f"Not an action id: {part[:40]!r}. Name actions by their ids (ids=12,15)."
            found[int(part)] = None
    if len(found) > MAX_IDS:
        many = f"At most {MAX_IDS} actions at a time, not {len(found)}"
        return (), f"{many}: use the filter and its “all matching” command."
    return tuple(found), None


def parse_filters(args: Mapping[str, str]) -> Filters:
    """Read the filter's parameters from ``args``; empty ones are no filter."""
    values: dict[str, str] = {}
    errors: dict[str, str] = {}
    found: dict[str, Any] = {}
    state = (args.get("status") or "").strip()
    for name in FIELDS:
        if name == "ids":
            ids, problem = parse_ids(args)
            if problem:
                errors[name] = problem
                values[name] = (args.get("ids") or "")[:MAX_LENGTH]
            elif ids:
                values[name], found["ids"] = ",".join(map(str, ids)), ids
            continue
        raw = (args.get(name) or "").strip()
        if name == "roots":
            # Failures list their roots unless roots=0: only what differs from the status's
            # default is kept, so the URL stays short and the checkbox reads the same.
            default = roots_by_default(
                state, error=(args.get("error") or "").strip(), ids=(args.get("ids") or "").strip()
            )
            wanted = default if not raw else raw.lower() in TRUE
            if wanted:
                found["roots_only"] = True
            if wanted != default:
                values[name] = "1" if wanted else "0"
            continue
        if name == time_ranges.FIELD:
            custom = any((args.get(other) or "").strip() for other in ("created_after", "created_before"))
            preset, problem = time_ranges.parse(raw, custom=custom)
            if problem:
                errors[name], values[name] = problem, raw[:MAX_LENGTH]
            elif preset is not None:
                values[name], found["created_after"] = preset.key, preset.since()
            continue
        if not raw:
            continue
        if name == "outbound":
            if raw.lower() in TRUE:
                values[name], found["outbound_only"] = "1", True
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
            except OverflowError:
                errors[name] = f"Out of range: {raw!r} is not between 0001-01-01 and 9999-12-31 in UTC."
                values[name] = raw
                continue
            values[name], found[FILTER_FIELDS[name]] = format_time(moment), moment
            continue
        values[name], found[FILTER_FIELDS[name]] = raw, raw
    where = make_filter(**found) if not errors else commands.ActionFilter()
    return Filters(values, where, errors)
