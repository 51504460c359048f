"""Webhooks: the completion endpoint for outbound actions (HMAC-SHA256 over a timestamp and
the raw body with STEPWISE_WEBHOOK_SECRET, replay window, idempotent by completion id, 4xx
JSON errors).

Its views are reached without a session: mark each ``@public`` (app.auth) and
``@csrf.exempt`` (app.csrf), and check the signature instead. (Empty until it is built.)
"""

from __future__ import annotations

from flask import Blueprint

bp = Blueprint("webhooks", __name__, url_prefix="/webhooks")
