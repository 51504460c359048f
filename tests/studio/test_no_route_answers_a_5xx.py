"""Given any route of the studio and any input a client can send it (out-of-range ids and
integers, times outside what a datetime holds, unknown enum values, NUL characters, deeply
nested or huge JSON, unknown parameters), then it answers 2xx, 3xx or 4xx: never a 5xx; and
a viewer is refused every command, never with a 5xx.

Property-based (Hypothesis), over every rule of the app's URL map, signed in as an admin so
every view runs past its role check, as a browser and as htmx. Bounded: a few dozen examples
per route (``FUZZ_EXAMPLES``), no example database (the checkout stays clean). What is sent
is in fuzz_inputs.py. Not a spec case: issue 12, "Never a 500".
"""

from __future__ import annotations

import pytest
from flask import Flask
from sqlalchemy.orm import Session

from tests.domain import Car
from tests.studio.conftest import MakeUser
from tests.studio.fuzz_inputs import (
    BASE,
    NASTY,
    NASTY_ARGS,
    db_rollback,
    names_for,
    path_of,
    prober,
    routes,
    signed_in_admin,
    some_work,
)
from tests.studio.support import PASSWORD, StudioClient


@pytest.fixture
def admin(app: Flask, make_user: MakeUser) -> StudioClient:
    return signed_in_admin(app, make_user)


@pytest.fixture
def work(session: Session, car: Car) -> None:
    some_work(session, car)


def test_no_route_answers_a_5xx_to_a_nasty_value_in_any_parameter(
    app: Flask, admin: StudioClient, work: None
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


def test_no_route_answers_a_5xx_whatever_it_is_sent(app: Flask, admin: StudioClient, work: None) -> None:
    failures: list[str] = []
    for rule, method in routes(app):
        try:
            prober(admin, rule, method)()
        except Exception as error:  # collect them all: one report of every route that fails
            failures.append(f"{method} {rule.rule}: {str(error)[:1500]}")
    assert not failures, "\n\n".join(failures)


def test_a_viewer_is_refused_every_command_without_a_5xx(
    app: Flask, viewer_client: StudioClient, work: None
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
