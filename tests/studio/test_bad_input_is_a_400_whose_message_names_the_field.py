"""Given bad input in a URL or a form (an id out of range, a negative page, a NUL
character, a date outside what a datetime holds, JSON nested too deep, a body over a
megabyte), then the answer is a 400 (or a 413) whose message names the field and says what
was wrong, and nothing is started or changed.

Not a spec case: issue 12, "Never a 500": "a clear 400 (or 404) and a message naming the field".
"""

from __future__ import annotations

import pytest
from flask import Flask
from sqlalchemy.orm import Session

from tests.domain import Car
from tests.studio.conftest import MakeUser
from tests.studio.fuzz_inputs import DEEP_JSON, signed_in_admin, some_work
from tests.studio.support import StudioClient


@pytest.fixture
def admin(app: Flask, make_user: MakeUser) -> StudioClient:
    return signed_in_admin(app, make_user)


@pytest.fixture
def work(session: Session, car: Car) -> None:
    some_work(session, car)


def test_bad_input_is_a_400_whose_message_names_the_field(admin: StudioClient, work: None) -> None:
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
