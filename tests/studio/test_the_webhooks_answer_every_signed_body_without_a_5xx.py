"""Given the two signed webhooks (a completion and a signal), when they are sent any body
at all with a valid signature (deep or huge JSON, bytes that are not UTF-8, a body over the
size limit, and Hypothesis's JSON values and completion-shaped objects), then they answer
2xx, 3xx or 4xx: never a 5xx.

Bounded like the route fuzz (``FUZZ_EXAMPLES``); not a spec case: issue 12, "Never a 500".
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from tests.domain import Car
from tests.studio.fuzz_inputs import DEEP_JSON, EXAMPLES, some_work
from tests.studio.support import StudioClient
from tests.studio.support_webhooks import SECRET, unix_now


@pytest.fixture
def work(session: Session, car: Car) -> None:
    some_work(session, car)


def signed_delivery(client: StudioClient, raw: bytes, url: str = "/webhooks/complete") -> Any:
    from app.webhooks.views import sign

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
    app: Flask, client: StudioClient, work: None
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
