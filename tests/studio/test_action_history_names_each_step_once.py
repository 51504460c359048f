"""The action page's history names the step an event is about once: "step ship", never
"step step ship", for every kind of event that names a step; a step that runs a
compensation (index -1) is "compensation N: undoes step X", there and in the steps table
(not "step 0", nor "visit 2" for the second compensation).

Not a spec case: the studio is ours (issue 12, §4: a history whose entries link the steps).
"""

from __future__ import annotations

import re

import pytest
from flask import Flask

from app import demo
from engine import registry
from tests.studio.support import StudioClient
from tests.studio.test_demo_order_compensates_when_shipping_fails import failed_order


@pytest.fixture(autouse=True)
def demo_orders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Actor types are class names: this test's ``Order`` rows are the demo's."""
    monkeypatch.setitem(registry._actor_classes, "Order", demo.Order)
    monkeypatch.setattr(demo.time, "sleep", lambda seconds: None)  # the bank's pause


def history(html: str) -> list[tuple[str, str]]:
    """(event, the step it names) for each row of the history that names one."""
    table = html[html.index('id="history-title"') :]
    rows = re.findall(r'<tr data-event="(\w+)">(.*?)</tr>', table, re.S)
    named = []
    for event, row in rows:
        found = re.search(r'data-step="\d+">([^<]*)</a>', row)
        if found:
            named.append((event, found[1]))
    return named


def test_each_event_names_its_step_once_and_compensations_say_what_they_undo(
    app: Flask, operator_client: StudioClient
) -> None:
    # Given an order the carrier refused, compensated (stock released, payment refunded)
    order_id = failed_order(app, 5)

    page = operator_client.get(f"/actions/{order_id}?history=tree").text
    named = history(page)

    # Then each kind of event names its step once
    assert "step step" not in page
    assert {
        ("step_started", "step ship"),
        ("attempt_failed", "step ship"),
        ("step_failed", "step ship"),
        ("children_spawned", "step reserve"),
        ("compensation_registered", "step reserve"),
        ("decided", "step screen"),
    } <= set(named)
    # And the steps that ran compensations say what they undid, without a "step" before them
    assert {
        ("compensation_started", "compensation 1: undoes step reserve"),
        ("compensation_succeeded", "compensation 2: undoes step fulfil"),
        ("step_concluded", "compensation 2: undoes step fulfil"),
    } <= set(named)
    assert all(label.startswith(("step ", "compensation ")) for _, label in named)


def test_the_steps_table_names_a_compensation_by_what_it_undoes_not_step_zero(
    app: Flask, operator_client: StudioClient
) -> None:
    order_id = failed_order(app, 5)

    page = operator_client.get(f"/actions/{order_id}").text

    assert (
        '<span class="step-name">undo release_stock</span> '
        '<span class="muted small">compensation 1: undoes step reserve</span>'
    ) in page
    assert 'undo refund_payment</span> <span class="muted small">step 0</span>' not in page
    assert not re.search(r'undo refund_payment</span>.{0,120}visit 2', page, re.S)
