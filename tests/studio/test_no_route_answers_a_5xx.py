"""Given any route of the studio and any input a client can send it (out-of-range ids and
integers, times outside what a datetime holds, unknown enum values, NUL characters, deeply
nested or huge JSON, unknown parameters), then it answers 2xx, 3xx or 4xx: never a 5xx.

Property-based (Hypothesis), over every rule of the app's URL map, signed in as an admin so
every view runs past its role check, as a browser and as htmx. Bounded: a few dozen examples
per route (``FUZZ_EXAMPLES``), no example database (the checkout stays clean). Not a spec
case: issue 12, "Never a 500".
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Any
from urllib.parse import quote

import pytest
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from sqlalchemy.orm import Session
from werkzeug.routing import Rule

import engine
from app import users
from tests.domain import Car
from tests.studio.conftest import MakeUser
from tests.studio.support import HTMX, PASSWORD, StudioClient
from tests.studio.support_webhooks import SECRET, unix_now

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

    from app import action_filters

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


@pytest.fixture
def admin(app: Flask, make_user: MakeUser) -> StudioClient:
    make_user("ada", users.ADMIN)
    client: StudioClient = app.test_client()  # type: ignore[assignment]
    assert client.login("ada").status_code == 302
    return client


@pytest.fixture
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


def test_no_route_answers_a_5xx_to_a_nasty_value_in_any_parameter(
    app: Flask, admin: StudioClient, some_work: None
) -> None:
    """Every parameter a route reads, each nasty value in turn, on real ids (1 to 4)."""
    failures: list[str] = []
    for rule, method in routes(app):
        path = path_of(rule, {name: "3" if "id" in name else "red" for name in rule.arguments})
        for name in names_for(app, rule):
            for value in NASTY if method == "POST" else NASTY_ARGS:
                params = {**BASE, name: value}
                try:
                    if method == "GET":
                        answer = admin.get(path, query_string=params)
                    else:
                        answer = admin.command(path, params)
                    code = str(answer.status_code)
                except Exception as error:  # TESTING propagates what would be a 500
                    code = f"{type(error).__name__}: {str(error)[:120]}"
                    db_rollback(app)
                if not code.isdigit() or int(code) >= 500:
                    failures.append(f"{method} {rule.rule} {name}={value[:40]!r} -> {code}")
    assert not failures, "\n".join(failures)


def test_no_route_answers_a_5xx_whatever_it_is_sent(app: Flask, admin: StudioClient, some_work: None) -> None:
    failures: list[str] = []
    for rule, method in routes(app):
        try:
            prober(admin, rule, method)()
        except Exception as error:  # collect them all: one report of every route that fails
            failures.append(f"{method} {rule.rule}: {str(error)[:1500]}")
    assert not failures, "\n\n".join(failures)


def signed_delivery(client: StudioClient, raw: bytes, url: str = "/webhooks/complete") -> Any:
    from app.pages.webhooks import sign

    stamp = str(unix_now())
    headers = {
        "Content-Type": "application/json",
        "X-Stepwise-Timestamp": stamp,
        "X-Stepwise-Signature": sign(SECRET, stamp, raw),
    }
    return client.post(url, data=raw, headers=headers)


WEBHOOKS = ("/webhooks/complete", "/webhooks/signal")
JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**80), max_value=2**80),
        st.floats(allow_nan=False),
        st.text(max_size=20),
    ),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
COMPLETIONS = st.fixed_dictionaries(
    {},
    optional={
        "id": JSON_VALUES | st.text(max_size=300),
        "action_id": JSON_VALUES | st.sampled_from([1, 3, 4, 2**63, 2**64, -1, 0]),
        "status": JSON_VALUES | st.sampled_from(["succeeded", "failed", "cancelled", "weird"]),
        "actor_type": JSON_VALUES | st.just("Car"),
        "actor_id": JSON_VALUES | st.just("1"),
        "name": JSON_VALUES | st.just("paint"),
        "payload": JSON_VALUES,
        "note": JSON_VALUES,
    },
)


def test_the_webhook_answers_every_signed_body_without_a_5xx(
    app: Flask, client: StudioClient, some_work: None
) -> None:
    app.config["STEPWISE_WEBHOOK_LIMIT"] = "100000 per minute"
    for raw in (
        DEEP_JSON.encode(),
        b'{"id":' * 5000 + b"1" + b"}" * 5000,
        b"\xff\xfe",
        b"x" * (2 * 1024 * 1024),
    ):
        for url in WEBHOOKS:
            assert signed_delivery(client, raw, url).status_code < 500, url

    @settings(
        max_examples=EXAMPLES * 4,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(body=COMPLETIONS | JSON_VALUES, url=st.sampled_from(WEBHOOKS))
    def probe(body: Any, url: str) -> None:
        answer = signed_delivery(client, json.dumps(body).encode(), url)
        assert answer.status_code < 500, f"{url} {body!r} -> {answer.status_code}: {answer.text[:300]}"

    probe()


def test_a_viewer_is_refused_every_command_without_a_5xx(
    app: Flask, viewer_client: StudioClient, some_work: None
) -> None:
    for rule, method in routes(app):
        if (
            method != "POST"
            or rule.endpoint.startswith("webhooks.")
            or rule.endpoint
            in (
                "auth.login",
                "auth.logout",
                "auth.password",
            )
        ):
            continue
        path = path_of(rule, {name: "1" for name in rule.arguments})
        answer = viewer_client.command(path, {"reason": "x"})
        assert answer.status_code in (403, 404, 405), f"POST {path} -> {answer.status_code}"
    assert viewer_client.login("victor", PASSWORD).status_code == 302


# --- what the bad input is told ---------------------------------------------------------------------


def test_bad_input_is_a_400_whose_message_names_the_field(admin: StudioClient, some_work: None) -> None:
    cases = {
        "/audit/?before=99999999999999999999": "before='99999999999999999999' is not a whole number",
        "/lanes/lane?key=red&after=-1": "after='-1' is not a whole number from 0",
        "/achievements/key?key=x&before=1e9": "before='1e9' is not a whole number",
        "/actions/?name=a%00b": "The field 'name' holds a NUL character",
    }
    for url, message in cases.items():
        answer = admin.get(url)
        assert answer.status_code == 400, url
        assert message in answer.text.replace("&#39;", "'"), url

    # An out-of-range date is the filter's own message, beside its field
    page = admin.get("/actions/?created_after=9999-12-31T23:59:59-14:00")
    assert page.status_code == 400
    assert "is not between 0001-01-01 and 9999-12-31 in UTC" in page.text

    # Deep JSON in a form: a 400 that says so, nothing started or changed
    deep = admin.command(
        "/catalog/start", {"actor_type": "Car", "actor_id": "1", "name": "drive", "arguments": DEEP_JSON}
    )
    assert deep.status_code == 400
    assert "too deeply nested" in deep.text
    payload = admin.command("/actions/3/reject", {"payload": DEEP_JSON})
    assert payload.status_code == 400
    assert "The payload is too deeply nested" in payload.text


def test_a_body_larger_than_a_megabyte_is_refused_with_a_413(admin: StudioClient) -> None:
    answer = admin.command("/catalog/start", {"arguments": "[" + "1," * 600_000 + "1]"})
    assert answer.status_code == 413
