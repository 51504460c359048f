"""The metrics tests' reader of the Prometheus text exposition (format 0.0.4): a small
parser that also checks the format itself (HELP and TYPE before each family's samples,
escaped label values, cumulative histogram buckets ending in +Inf), a scrape from a fresh
session, and the families every exposition holds. Used by
test_metrics_expose_the_state_of_actions_and_lanes.py and
test_metrics_count_events_as_they_happen.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta

import engine
from engine import metrics
from tests.domain import Car

FAMILIES = {
    "stepwise_actions": "gauge",
    "stepwise_lane_backlog": "gauge",
    "stepwise_lanes": "gauge",
    "stepwise_action_duration_seconds": "histogram",
    "stepwise_queue_latency_seconds": "histogram",
    "stepwise_attempt_queue_latency_seconds": "histogram",
    "stepwise_heartbeat_timeouts_total": "counter",
    "stepwise_attempt_timeouts_total": "counter",
    "stepwise_retries_total": "counter",
    "stepwise_sweeper_recoveries_total": "counter",
    "stepwise_actions_completed_total": "counter",
    "stepwise_signals_sent_total": "counter",
    "stepwise_signals_consumed_total": "counter",
    "stepwise_compensations_total": "counter",
    "stepwise_compensations_failed_total": "counter",
    "stepwise_signal_waits": "gauge",
    "stepwise_oldest_signal_wait_seconds": "gauge",
    "stepwise_signals_pending": "gauge",
    "stepwise_schedules": "gauge",
    "stepwise_schedule_overdue_seconds": "gauge",
    "stepwise_schedule_lag_seconds": "histogram",
    "stepwise_schedule_ticks_fired_total": "counter",
    "stepwise_schedule_ticks_skipped_total": "counter",
}

# --- a small parser of the text format, strict about what it accepts ------------------------

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
VALUE = re.compile(r"[+-]?(?:Inf|NaN|[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
Labels = frozenset[tuple[str, str]]


def unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"\\": "\\", '"': '"', "n": "\n"}[m.group(1)], text)


@dataclass
class Family:
    name: str
    help: str
    type: str = ""
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)


def parse_sample(line: str) -> tuple[str, dict[str, str], float]:
    match = NAME.match(line)
    assert match, f"no metric name: {line!r}"
    pos, labels = match.end(), {}
    if line[pos] == "{":
        pos += 1
        while line[pos] != "}":
            label = LABEL.match(line, pos)
            assert label, f"bad label at {pos}: {line!r}"
            assert label.group(1) not in labels, f"label repeated: {line!r}"
            labels[label.group(1)] = unescape(label.group(2))
            pos = label.end()
            if line[pos] == ",":
                pos += 1
        pos += 1
    assert line[pos] == " " and VALUE.fullmatch(line[pos + 1 :]), f"bad value: {line!r}"
    return match.group(), labels, float(line[pos + 1 :])


def check_histogram(family: Family) -> None:
    """Per label set: buckets in increasing ``le`` order with non-decreasing counts, the
    last one ``+Inf`` and equal to ``_count``, and a ``_sum``."""
    series: dict[Labels, dict[str, list[tuple[str, float]]]] = {}
    for name, labels, value in family.samples:
        key = frozenset((k, v) for k, v in labels.items() if k != "le")
        suffix = name.removeprefix(family.name + "_")
        series.setdefault(key, {}).setdefault(suffix, []).append((labels.get("le", ""), value))
    for key, parts in series.items():
        buckets = parts["bucket"]
        bounds = [float(le) for le, _ in buckets]
        counts = [value for _, value in buckets]
        assert bounds == sorted(set(bounds)) and bounds[-1] == float("inf"), (family.name, key)
        assert counts == sorted(counts), (family.name, key, counts)
        assert parts["count"] == [("", counts[-1])], (family.name, key)
        assert len(parts["sum"]) == 1, (family.name, key)


def parse(text: str) -> dict[str, Family]:
    """Families by name; fails on anything the 0.0.4 text format does not allow."""
    assert text.endswith("\n")
    families: dict[str, Family] = {}
    current: Family | None = None
    for line in text[:-1].split("\n"):
        if line.startswith("# HELP "):
            name, _, help_text = line.removeprefix("# HELP ").partition(" ")
            assert NAME.fullmatch(name) and name not in families, line
            current = families[name] = Family(name, help_text)
        elif line.startswith("# TYPE "):
            name, _, kind = line.removeprefix("# TYPE ").partition(" ")
            assert current is not None and current.name == name, f"TYPE without its HELP: {line}"
            assert not current.type and not current.samples and kind in TYPES, line
            current.type = kind
        else:
            assert line and not line.startswith("#"), f"unexpected line: {line!r}"
            assert current is not None and current.type, f"sample before HELP/TYPE: {line}"
            sample = parse_sample(line)
            suffixes = ("_bucket", "_sum", "_count") if current.type == "histogram" else ("",)
            assert sample[0] in {current.name + s for s in suffixes}, f"{line} outside its family"
            assert sample[0] not in families or sample[0] == current.name, line
            current.samples.append(sample)
    for family in families.values():
        if family.type == "histogram":
            check_histogram(family)
    return families


class Scrape:
    def __init__(self, text: str) -> None:
        self.text = text
        self.families = parse(text)

    def series(self, metric: str) -> dict[Labels, float]:
        """Every sample named ``metric``, by its labels."""
        return {
            frozenset(labels.items()): value
            for family in self.families.values()
            for name, labels, value in family.samples
            if name == metric
        }

    def value(self, metric: str, **labels: str) -> float:
        return self.series(metric)[frozenset(labels.items())]

    def buckets(self, metric: str, name: str) -> dict[float, float]:
        """A histogram's cumulative bucket counts for action ``name``, by upper bound."""
        return {
            float(dict(labels)["le"]): value
            for labels, value in self.series(f"{metric}_bucket").items()
            if dict(labels)["name"] == name
        }


def scrape(window: timedelta = metrics.WINDOW, lane_limit: int = metrics.LANE_LIMIT) -> Scrape:
    """Render from a fresh session: what a /metrics request in another process would see."""
    with engine.new_session() as fresh:
        return Scrape(metrics.render(fresh, window=window, lane_limit=lane_limit))


def expected_buckets(bounds: tuple[float, ...], observations: list[float]) -> dict[float, float]:
    cumulative = {bound: float(sum(o <= bound for o in observations)) for bound in bounds}
    return cumulative | {float("inf"): float(len(observations))}


def define_paint(**options: object) -> None:
    """``paint`` is outbound: it stays performing (holding its lane) until completed."""
    engine.define(Car, "paint", lambda car, *args: None, outbound=True, **options)
