"""Given action trees in the database, when the metrics are rendered, then the Prometheus
text exposition (format 0.0.4, written by prometheus_client) counts them exactly: actions by
status and name, lane backlog, durations and queue latency as histograms, and retries and
sweeper recoveries as monotonic counters that survive pruning the history.

Not a spec case: Stepped has no metrics (issue 3, section 5). The exposition is parsed by
a small parser below that also checks the format itself: HELP and TYPE before each
family's samples, escaped label values, cumulative histogram buckets ending in +Inf.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

import engine
from engine import history, metrics, testing
from engine.models import Action, ActionEvent
from engine.retry import RetryPolicy
from tests.domain import Car

FAMILIES = {
    "stepwise_actions": "gauge",
    "stepwise_lane_backlog": "gauge",
    "stepwise_lanes": "gauge",
    "stepwise_action_duration_seconds": "histogram",
    "stepwise_queue_latency_seconds": "histogram",
    "stepwise_retries_total": "counter",
    "stepwise_sweeper_recoveries_total": "counter",
    "stepwise_actions_completed_total": "counter",
    "stepwise_signals_sent_total": "counter",
    "stepwise_signals_consumed_total": "counter",
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


# --- the tests --------------------------------------------------------------------------------


def test_an_empty_database_exposes_every_family_with_zero_counters(session: Session) -> None:
    # When
    result = scrape()

    # Then
    assert {name: family.type for name, family in result.families.items()} == FAMILIES
    assert all(family.help for family in result.families.values())
    assert result.value("stepwise_retries_total") == 0
    assert result.value("stepwise_sweeper_recoveries_total") == 0
    assert result.value("stepwise_lanes") == 0
    assert result.series("stepwise_actions") == {}
    assert metrics.CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_actions_are_counted_by_status_and_by_name(session: Session, car: Car) -> None:
    """Given a finished three-action tree, a failed action and a lane holding a performing,
    a pending and a superseded paint job, each (status, name) is counted, and every other
    known status of those names is present with 0."""
    # Given
    visit = engine.define(Car, "visit")

    @visit.step
    def go(car: Car, step: engine.StepContext) -> None:
        step.do("honk")
        step.do("drive", 5)

    define_paint()
    engine.now(car, "visit")
    testing.drain()
    engine.now(car, "paint", "red")  # performing: the lane's current action
    engine.now(car, "paint", "blue")  # queued, then superseded by green
    engine.now(car, "paint", "green")
    with testing.handle_exceptions():
        assert engine.now(car, "breakdown").status == "failed"

    # When
    result = scrape()

    # Then
    series = {
        (dict(labels)["status"], dict(labels)["name"]): n
        for labels, n in result.series("stepwise_actions").items()
    }
    counted = {key: n for key, n in series.items() if n}
    assert counted == {
        ("succeeded", "visit"): 1,
        ("succeeded", "honk"): 1,
        ("succeeded", "drive"): 1,
        ("performing", "paint"): 1,
        ("pending", "paint"): 1,
        ("superseded", "paint"): 1,
        ("failed", "breakdown"): 1,
    }
    assert len(series) == 5 * len(engine.status.ACTION_STATUSES)
    assert series["cancelled", "visit"] == 0
    assert result.value("stepwise_lanes") == 1


def test_the_lane_backlog_counts_pending_actions_per_key_and_caps_the_keys(
    session: Session, car: Car
) -> None:
    """Given four lanes (keys named by the second argument), three of them with a queued
    action behind the performing one, the backlog is 1 in each of those three; capped to
    two keys, the longest (ties by key) are kept and the third is summed under "(other)"."""
    # Given
    define_paint(concurrency_key=lambda car, color, garage: garage)
    odd = 'w"e\\st\n'
    for garage in ("north", "south", odd, "east"):
        engine.now(car, "paint", "red", garage)
    for garage in ("north", "south", odd):
        assert engine.now(car, "paint", "blue", garage).status == "pending"

    # When
    uncapped, capped = scrape(), scrape(lane_limit=2)

    # Then
    backlog = {frozenset({("concurrency_key", key)}): 1.0 for key in ("north", "south", odd)}
    assert uncapped.series("stepwise_lane_backlog") == backlog
    assert capped.series("stepwise_lane_backlog") == {
        frozenset({("concurrency_key", "north")}): 1.0,
        frozenset({("concurrency_key", "south")}): 1.0,
        frozenset({("concurrency_key", "(other)")}): 1.0,
    }
    assert uncapped.value("stepwise_lanes") == capped.value("stepwise_lanes") == 4


def test_durations_form_a_histogram_by_name_over_the_recent_window(session: Session, car: Car) -> None:
    """Given paint jobs that took 10 s (two hours ago), 3 s and 45 s, and a drive that took
    no time (the clock is frozen), the last hour's histogram holds the 3 s and 45 s paint
    jobs and the drive; a three-hour window also holds the 10 s one."""
    # Given
    define_paint()
    testing.freeze(testing.travel(timedelta()))
    for color, seconds in (("old", 10), ("red", 3), ("blue", 45)):
        engine.now(car, "paint", color)
        testing.travel(timedelta(seconds=seconds))
        assert engine.complete(car, "paint", "succeeded")
        if color == "old":
            testing.travel(timedelta(hours=2))
    engine.now(car, "drive", 1)

    # When
    last_hour, last_three_hours = scrape(), scrape(window=timedelta(hours=3))

    # Then
    metric = "stepwise_action_duration_seconds"
    assert last_hour.buckets(metric, "paint") == expected_buckets(metrics.DURATION_BUCKETS, [3, 45])
    assert last_hour.value(f"{metric}_count", name="paint") == 2
    assert last_hour.value(f"{metric}_sum", name="paint") == 48
    assert last_hour.buckets(metric, "drive") == expected_buckets(metrics.DURATION_BUCKETS, [0])
    assert last_hour.value(f"{metric}_sum", name="drive") == 0
    assert last_three_hours.buckets(metric, "paint") == expected_buckets(
        metrics.DURATION_BUCKETS, [10, 3, 45]
    )
    assert last_three_hours.value(f"{metric}_sum", name="paint") == 58


def test_queue_latency_runs_from_enqueue_to_start(session: Session, car: Car) -> None:
    """Given a drive requested with ``later()`` and picked up 30 s later, a paint job that
    started at once, and a second paint job requested then that waited in the lane until
    the first was completed 65 s later, the latency histogram holds 30 s for drive and
    0 s and 65 s for paint."""
    # Given
    define_paint()
    testing.freeze(testing.travel(timedelta()))
    engine.later(car, "drive", 1)
    session.commit()
    testing.travel(timedelta(seconds=30))
    testing.drain()
    engine.now(car, "paint", "red")
    engine.later(car, "paint", "blue")
    session.commit()
    testing.travel(timedelta(seconds=5))
    testing.drain()  # blue is admitted and queued behind red
    testing.travel(timedelta(seconds=60))
    assert engine.complete(car, "paint", "succeeded")
    testing.drain()
    session.expire_all()
    assert [a.status for a in session.scalars(select(Action).where(Action.name == "paint"))] == [
        "succeeded",
        "performing",
    ]

    # When
    result = scrape()

    # Then
    metric = "stepwise_queue_latency_seconds"
    assert result.buckets(metric, "drive") == expected_buckets(metrics.LATENCY_BUCKETS, [30])
    assert result.buckets(metric, "paint") == expected_buckets(metrics.LATENCY_BUCKETS, [0, 65])
    assert result.value(f"{metric}_sum", name="drive") == 30
    assert result.value(f"{metric}_sum", name="paint") == 65
    assert result.value(f"{metric}_count", name="paint") == 2

    # And an hour later they are out of the window
    testing.travel(timedelta(hours=1, seconds=1))
    assert scrape().series(f"{metric}_count") == {}


def test_retries_and_sweeper_recoveries_are_counted_as_they_happen_and_survive_pruning(
    session: Session, car: Car
) -> None:
    """Given an action whose three attempts all fail (two retries), and recovery events in
    the history (written here directly: the sweeper records ``recovered`` with cause
    "sweeper"), the counters count the retries and only the sweeper's recoveries; when the
    history is pruned, the counters keep their values (``rate()`` never sees them drop)."""
    # Given
    testing.freeze(testing.travel(timedelta()))
    engine.define(Car, "deliver", Car.breakdown, retry=RetryPolicy(max_attempts=3, jitter=0))
    with testing.handle_exceptions():
        action = engine.now(car, "deliver")
        for _ in range(3):
            testing.travel(timedelta(minutes=1))
            testing.drain()
    session.expire_all()
    assert session.get(Action, action.id).status == "failed"  # type: ignore[union-attr]
    with engine.new_session() as writer:
        delivered = writer.get(Action, action.id)
        history.record(writer, delivered, "recovered", cause=history.SWEEPER)
        history.record(writer, delivered, "recovered", cause=history.SWEEPER)
        history.record(writer, delivered, "recovered", cause=history.OPERATOR)
        writer.commit()
    with engine.new_session() as writer:  # a recovery rolled back is not counted
        history.record(writer, writer.get(Action, action.id), "recovered", cause=history.SWEEPER)
        writer.rollback()

    # When
    result = scrape()

    # Then
    assert result.value("stepwise_retries_total") == 2
    assert result.value("stepwise_sweeper_recoveries_total") == 2

    # And when the history is pruned, the counters stay where they were
    with engine.new_session() as pruner:
        pruner.execute(delete(ActionEvent))
        pruner.commit()
    pruned = scrape()
    assert pruned.value("stepwise_retries_total") == 2
    assert pruned.value("stepwise_sweeper_recoveries_total") == 2


def test_completions_are_counted_by_status_as_they_happen_and_survive_pruning(
    session: Session, car: Car
) -> None:
    """Given two actions that succeed and one that fails, the completions counter counts
    them by status in the transactions that completed them; deleting the actions and
    their history leaves it where it was."""
    # Given
    engine.define(Car, "deliver", Car.breakdown, retry=RetryPolicy(max_attempts=1, jitter=0))
    engine.now(car, "drive", 1)
    engine.now(car, "drive", 2)
    with testing.handle_exceptions():
        engine.now(car, "deliver")

    # Then
    counted = {frozenset({("status", "succeeded")}): 2, frozenset({("status", "failed")}): 1}
    assert scrape().series("stepwise_actions_completed_total") == counted

    # And when the history is pruned, the counter stays where it was
    with engine.new_session() as pruner:
        pruner.execute(delete(ActionEvent))
        pruner.commit()
    assert scrape().series("stepwise_actions_completed_total") == counted


def test_signals_sent_consumed_pending_and_the_oldest_wait(session: Session, car: Car) -> None:
    """Given two actions waiting for signals since 90 and 30 seconds, one signal consumed
    and one kept in an inbox, the signal counters and gauges say so."""
    # Given
    testing.freeze()
    gate = engine.define(Car, "gate", concurrency_key=lambda car, n: f"gate/{n}")

    @gate.step
    def hold(car: Car, step: engine.StepContext, n: int) -> None:
        step.wait_for("open")

    @gate.step
    def after(car: Car, step: engine.StepContext, n: int) -> None:
        step.wait_for("close")

    first = engine.now(car, "gate", 1)
    testing.travel(timedelta(seconds=60))
    second = engine.now(car, "gate", 2)
    testing.travel(timedelta(seconds=30))
    engine.signal(first, "open")  # consumed: the first gate now waits for "close"
    engine.signal(second, "close")  # kept: the second gate waits for "open"
    testing.drain()

    # When
    result = scrape()

    # Then
    assert result.value("stepwise_signals_sent_total") == 2
    assert result.value("stepwise_signals_consumed_total") == 1
    assert result.value("stepwise_signals_pending") == 1
    assert result.value("stepwise_signal_waits") == 2
    assert result.value("stepwise_oldest_signal_wait_seconds") == 30.0


def test_counters_are_added_to_once_per_batch_in_the_callers_transaction(session: Session) -> None:
    """``metrics.count`` adds to the counters in the caller's transaction (a rollback takes
    its increment back), in one statement, and refuses a counter nobody declared."""
    # When
    with engine.new_session() as batch:
        metrics.count(batch, {"stepwise_retries_total": 3, "stepwise_sweeper_recoveries_total": 0})
        batch.commit()
    with engine.new_session() as batch:
        metrics.count(batch, {"stepwise_retries_total": 5})
        batch.rollback()
    with engine.new_session() as batch:
        metrics.count(batch, {"stepwise_retries_total": 1, "stepwise_sweeper_recoveries_total": 1})
        batch.commit()

    with engine.new_session() as batch:
        metrics.count_by(batch, "stepwise_actions_completed_total", "status", {"succeeded": 40, "failed": 2})
        metrics.count_by(batch, "stepwise_actions_completed_total", "status", {"failed": 1, "cancelled": 0})
        batch.commit()

    # Then
    result = scrape()
    assert result.value("stepwise_retries_total") == 4
    assert result.value("stepwise_sweeper_recoveries_total") == 1
    assert result.series("stepwise_actions_completed_total") == {
        frozenset({("status", "succeeded")}): 40,
        frozenset({("status", "failed")}): 3,
    }
    with engine.new_session() as batch, pytest.raises(ValueError, match="declare them"):
        metrics.count(batch, {"stepwise_typo_total": 1})


def test_label_values_are_escaped_in_valid_exposition_text(session: Session, car: Car) -> None:
    """Given an action whose name holds a double quote, a backslash and a newline, its
    label value is escaped (\\", \\\\, \\n) and parses back to the name."""
    # Given
    odd = 'say "hi"\\ there\nnow'
    engine.define(Car, odd, lambda car: None)
    engine.now(car, odd)

    # When
    result = scrape()

    # Then
    assert 'stepwise_actions{name="say \\"hi\\"\\\\ there\\nnow",status="succeeded"} 1.0\n' in result.text
    assert result.value("stepwise_actions", status="succeeded", name=odd) == 1
    assert result.value("stepwise_action_duration_seconds_count", name=odd) == 1
    assert all(line.startswith(("# HELP ", "# TYPE ", "stepwise_")) for line in result.text.splitlines())
