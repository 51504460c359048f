"""Given the studio, every form that changes something carries the session's CSRF token, and
every state-changing request without the right token is refused with 400 before its view
runs, so nothing changes. htmx sends the token in a header set on <body>.

Not a spec case: the studio is ours (issue 4, "Access"). The checks walk the app's URL map,
so the command views other pages add are covered as soon as they exist: only the webhooks
blueprint (HMAC-signed) may be exempt.
"""

from __future__ import annotations

import json
import re

import pytest
from flask import Blueprint, Flask
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from werkzeug.routing import Rule

import engine
from app.security import csrf, users
from app.security.auth import requires
from app.views import command_response
from engine.models import Action, AuditEntry
from tests.domain import Car
from tests.studio.support import HTMX, StudioClient, forms

probe = Blueprint("csrf_probe", __name__, url_prefix="/csrf-probe")


def order_paint(car: Car, *colors: str) -> None:
    """The paint shop is asked; it completes the action from outside."""


@probe.post("/actions/<int:action_id>/cancel")
@requires(users.OPERATOR)
def cancel(action_id: int) -> object:
    result = engine.commands.cancel(action_id, by="olga")
    return command_response(result.reason, ok=bool(result))


@pytest.fixture(autouse=True)
def with_probe(app: Flask) -> None:
    app.register_blueprint(probe)


def state_changing(app: Flask) -> list[Rule]:
    return [
        rule
        for rule in app.url_map.iter_rules()
        if rule.methods and rule.methods & {"POST", "PUT", "PATCH", "DELETE"}
    ]


def url(rule: Rule) -> str:
    """The rule's URL with a placeholder for each argument (the check runs before the view)."""
    return re.sub(r"<(?:int:)?[^>]+>", "1", rule.rule)


def test_every_form_on_every_page_carries_the_sessions_token(
    app: Flask, operator_client: StudioClient
) -> None:
    # Given every page without arguments, as an operator sees it
    pages = [
        rule.rule
        for rule in app.url_map.iter_rules()
        if rule.methods and "GET" in rule.methods and not rule.arguments and rule.endpoint != "static"
    ]
    assert "/" in pages
    token = operator_client.csrf_token()
    for page in pages:
        answer = operator_client.get(page)
        if answer.mimetype != "text/html":  # JSON, an event stream: no forms (and may not end)
            answer.close()
            continue
        html = answer.text
        # Then every POST form has the hidden token field
        for form in forms(html):
            if form.method == "post":
                assert form.inputs.get(csrf.FIELD) == token, (
                    f"a form on {page} posts to {form.action} without it"
                )
        # And htmx sends the token with every request from the page
        if "<body" in html:
            headers = re.search(r"<body hx-headers='([^']*)'", html)
            assert headers is not None, page
            assert json.loads(headers.group(1)) == {csrf.HEADER: token}
            assert any(form.method == "post" for form in forms(html)), f"{page} has no sign-out form"


def test_the_sign_in_form_carries_a_token_too(client: StudioClient) -> None:
    (form,) = forms(client.get("/login").text)
    assert form.method == "post"
    assert form.inputs[csrf.FIELD] == client.csrf_token()


@pytest.mark.parametrize("sent", [None, "", "forged-token"], ids=["missing", "empty", "wrong"])
def test_every_state_changing_route_refuses_a_request_without_the_right_token(
    app: Flask, operator_client: StudioClient, sent: str | None
) -> None:
    rules = [rule for rule in state_changing(app) if rule.endpoint.split(".")[0] != "webhooks"]
    assert {"auth.logout", "auth.login", "csrf_probe.cancel"} <= {rule.endpoint for rule in rules}
    for rule in rules:
        data = {} if sent is None else {csrf.FIELD: sent}
        for method in sorted((rule.methods or set()) & {"POST", "PUT", "PATCH", "DELETE"}):
            for headers in ({}, HTMX):
                answer = operator_client.open(url(rule), method=method, data=data, headers=headers)
                assert answer.status_code == 400, (method, rule.endpoint)
                assert "nothing was changed" in answer.text


def test_a_refused_command_changes_nothing(operator_client: StudioClient, session: Session, car: Car) -> None:
    # Given an outbound action waiting to be completed
    engine.define(Car, "paint", order_paint, outbound=True)
    action = engine.now(car, "paint")

    # When the cancel form is sent with another session's token, as a form and through htmx
    page = operator_client.post(f"/csrf-probe/actions/{action.id}/cancel", data={csrf.FIELD: "x" * 43})
    fragment = operator_client.post(
        f"/csrf-probe/actions/{action.id}/cancel", headers={**HTMX, csrf.HEADER: "x" * 43}
    )

    # Then both are refused with a message that says what to do, and nothing changed
    assert page.status_code == fragment.status_code == 400
    assert "does not match your session" in page.text
    assert "Reload the page and try again." in page.text
    assert fragment.headers["HX-Retarget"] == "#flash"
    session.expire_all()
    assert session.get(Action, action.id).status == "performing"  # type: ignore[union-attr]
    assert session.scalar(select(func.count()).select_from(AuditEntry)) == 0
    # And the operator is still signed in
    assert operator_client.get("/").status_code == 200


def test_the_token_in_the_htmx_header_is_accepted(
    operator_client: StudioClient, session: Session, car: Car
) -> None:
    engine.define(Car, "paint", order_paint, outbound=True)
    action = engine.now(car, "paint")

    answer = operator_client.post(
        f"/csrf-probe/actions/{action.id}/cancel", headers={**HTMX, csrf.HEADER: operator_client.csrf_token()}
    )

    assert answer.status_code == 200
    session.expire_all()
    assert session.get(Action, action.id).status == "cancelled"  # type: ignore[union-attr]


def test_signing_out_without_the_token_keeps_the_session(operator_client: StudioClient) -> None:
    assert operator_client.post("/logout").status_code == 400
    assert operator_client.get("/").status_code == 200


def test_only_views_marked_exempt_skip_the_check(app: Flask) -> None:
    # The exemption is for requests authenticated otherwise (the webhook's HMAC signature)
    exempt = [
        endpoint
        for endpoint, view in app.view_functions.items()
        if getattr(view, "csrf_exempt", False) or endpoint.split(".")[0] in csrf._exempt_blueprints
    ]
    assert all(endpoint.startswith("webhooks.") for endpoint in exempt), exempt
