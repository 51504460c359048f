"""Helpers of the webhook tests: sign and send a completion as an outside system would."""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

from werkzeug.test import TestResponse

from app.webhooks.views import sign
from engine import clock
from tests.studio.conftest import TEST_CONFIG
from tests.studio.support import StudioClient

SECRET: str = TEST_CONFIG["STEPWISE_WEBHOOK_SECRET"]
URL = "/webhooks/complete"


def unix_now() -> int:
    return round(clock.now().replace(tzinfo=UTC).timestamp())


def deliver(
    client: StudioClient,
    body: Any = None,
    *,
    raw: bytes | None = None,
    secret: str = SECRET,
    timestamp: int | str | None = None,
    signature: str | None = None,
    headers: dict[str, str] | None = None,
    url: str = URL,
) -> TestResponse:
    """POST ``body`` (as JSON, or ``raw`` bytes) signed with ``secret`` at ``timestamp``
    (default: now); ``signature`` replaces the computed one; a header given as "" is left out."""
    data = raw if raw is not None else json.dumps(body).encode()
    stamp = str(unix_now() if timestamp is None else timestamp)
    sent = {
        "Content-Type": "application/json",
        "X-Stepwise-Timestamp": stamp,
        "X-Stepwise-Signature": sign(secret, stamp, data) if signature is None else signature,
        **(headers or {}),
    }
    return client.post(url, data=data, headers={k: v for k, v in sent.items() if v != ""})
