"""What the no-5xx tests send the studio: the parameter names its views read, values that
are out of range, malformed or huge (and the few that broke a view once), the routes of the
app's URL map with their paths filled in, a Hypothesis prober of one route, an admin to send
them as and a few actions for the ids to reach. Used by test_no_route_answers_a_5xx.py,
test_the_webhooks_answer_every_signed_body_without_a_5xx.py and
test_bad_input_is_a_400_whose_message_names_the_field.py.
"""

from __future__ import annotations

import os
import re
import tempfile
from typing import Any
from urllib.parse import quote

from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from sqlalchemy.orm import Session
from werkzeug.routing import Rule

import engine
from app.security import users
from tests.domain import Car
from tests.studio.conftest import MakeUser
from tests.studio.support import HTMX, StudioClient

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
# Hypothesis's caches go to the temporary folder, not .hypothesis/ in the checkout.
set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "stepwise-hypothesis"))

#: Every parameter name a view reads, and a few it does not.
PARAMS = sorted(
    [
        "after",
        "before",
        "by",
        "checksum_key",
        "command",
        "commands_for",
        "expand",
        "history",
        "key",
        "mode",
        "name",
        "next",
        "note",
        "payload",
        "q",
        "reason",
        "role",
        "row_id",
        "timeout_seconds",
        "verb",
        "window",
        "limit",
        "status",
        "actor_type",
        "actor_id",
        "concurrency_key",
        "roots",
        "created_after",
        "created_before",
        "waiting",
        "outbound",
        "arguments",
        "password",
        "sort",
        "min_queue",
        "min_wait",
        "single",
        "all",
        "page",
        "id",
        "action_id",
        "confirm",
        "current_password",
        "new_password",
        "new_password_again",
        "range",
        "tz",
        "cron",
        "every",
        "timezone",
        "missed",
        "overlap",
        "action",
        "unknown",
    ]
)

DEEP_JSON = "[" * 100_000 + "]" * 100_000
SPECIAL = (
    "",
    "0",
    "1",
    "2",
    "-1",
    "+1",
    "1.5",
    "1e309",
    "nan",
    "Infinity",
    "9223372036854775807",
    "9223372036854775808",
    "99999999999999999999",
    "-99999999999999999999",
    "0001-01-01",
    "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59-14:00",
    "10000-01-01",
    "2025-02-30",
    "2025-01-01T00:00:00Z",
    "1h",
    "24h",
    "7d",
    "999999999d",
    "performing",
    "failed",
    "pending",
    "all",
    "tree",
    "cancel",
    "retry",
    "viewer",
    "admin",
    "prefix",
    "exact",
    "true",
    "null",
    "[]",
    "{}",
    '{"a": 1}',
    "[1, 2, 3]",
    '"text"',
    DEEP_JSON,
    '{"a":' * 5000 + "1" + "}" * 5000,
    "x" * 70_000,
    "\x00",
    "a\x00b",
    "\ud7ff\ue000",
    "../../etc/passwd",
    "<script>",
    "Car/1/",
    "%",
    "_",
)

VALUES = st.one_of(
    st.sampled_from(SPECIAL),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.text(max_size=40),
)
SEGMENTS = st.one_of(
    st.sampled_from(["1", "2", "3", "0", "9223372036854775807", "99999999999999999999", "Car", "drive"]),
    st.integers(min_value=0, max_value=2**70).map(str),
    st.text(min_size=1, max_size=30),
)
#: Values that broke a view once: each is sent in every parameter a route reads.
NASTY = (
    "99999999999999999999",
    "-9223372036854775809",
    "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59-14:00",
    "1e309",
    DEEP_JSON,
    "a\x00b",
    "x" * 5000,
    "nan",
    "weird",
    '{"a": 1e309, "b": NaN}',
)
#: A query string is short: the deep and the long values are for forms and bodies.
NASTY_ARGS = tuple(v for v in NASTY if len(v) < 100)
#: Parameters that take a view past its early returns (a lane, a key and an action that exist).
BASE = {
    "key": "red",
    "verb": "cancel",
    "status": "pending",
    "name": "paint",
    "actor_type": "Car",
    "actor_id": "1",
}


def routes(app: Flask) -> list[tuple[Rule, str]]:
    found = []
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        if rule.endpoint == "static":
            continue
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            found.append((rule, method))
    return found


def names_for(app: Flask, rule: Rule) -> list[str]:
    """The parameter names a route's module mentions (quoted), among PARAMS, plus the filter's."""
    import inspect as source

    from app.actions import filters as action_filters

    view = source.unwrap(app.view_functions[rule.endpoint])
    module = source.getmodule(view)
    text = source.getsource(module) if module is not None else ""
    quoted = set(re.findall(r"[\"']([a-z_]+)[\"']", text))
    filters = set(action_filters.FIELDS) if "filters" in text else set()
    return sorted((quoted & set(PARAMS)) | filters | {"before", "after"})


def db_rollback(app: Flask) -> None:
    from app.database import db

    with app.app_context():
        db.session.rollback()


def path_of(rule: Rule, segments: dict[str, str]) -> str:
    def fill(match: re.Match[str]) -> str:
        return quote(segments[match.group(1)], safe="")

    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", fill, rule.rule)


def signed_in_admin(app: Flask, make_user: MakeUser) -> StudioClient:
    """A client signed in as ``ada``, an admin: every view runs past its role check."""
    make_user("ada", users.ADMIN)
    client: StudioClient = app.test_client()  # type: ignore[assignment]
    assert client.login("ada").status_code == 302
    return client


def some_work(session: Session, car: Car) -> None:
    """Ids 1 to 4 exist (a drive done, one failed, an outbound one waiting and its queue), so
    a fuzzed id sometimes reaches a real row."""
    engine.define(Car, "drive", lambda car, miles: car.drive(miles))
    engine.define(Car, "breakdown", lambda car: car.breakdown())
    engine.define(
        Car, "paint", lambda car, color: None, outbound=True, concurrency_key=lambda car, color: color
    )
    with engine.handling():
        engine.now(car, "drive", 3)
        engine.now(car, "breakdown")
    engine.now(car, "paint", "red")
    engine.now(car, "paint", "red")


def prober(client: StudioClient, rule: Rule, method: str) -> Any:
    """A Hypothesis test of one route: ``prober(...)()`` runs it."""
    names = st.sampled_from(names_for(client.application, rule))

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        segments=st.fixed_dictionaries({name: SEGMENTS for name in rule.arguments}),
        params=st.dictionaries(names, VALUES, max_size=4).map(lambda p: {**BASE, **p}),
        htmx=st.booleans(),
    )
    def probe(segments: dict[str, str], params: dict[str, str], htmx: bool) -> None:
        path = path_of(rule, segments)
        if method == "GET":
            answer = client.get(path, query_string=params, headers=HTMX if htmx else {})
        else:
            answer = client.command(path, params, htmx=htmx)
        shown = {k: v[:60] for k, v in params.items()}
        assert answer.status_code < 500, (
            f"{method} {path} {shown} -> {answer.status_code}: {answer.text[:300]}"
        )

    return probe
