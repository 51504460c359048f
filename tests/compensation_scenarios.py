"""The workflows the compensation tests share: an order refunded when its shipment fails,
and a booking that holds a seat, then charges a card, under a timeout."""

from __future__ import annotations

from datetime import timedelta

import engine
from engine import StepContext
from engine.definition import Definition
from tests.domain import Car


def order_that_fails_to_ship_once(journal: list[str]) -> Definition:
    """``order`` pays ("paid", undone by ``refund``: "refund"), then delivers through a
    ``ship`` child that fails once (the carrier is down) and ships ("shipped") when
    retried. Returns the order, for a test to add steps to."""
    tries = {"ship": 0}

    def ship(car: Car) -> None:
        tries["ship"] += 1
        if tries["ship"] == 1:
            raise RuntimeError("the carrier is down")
        journal.append("shipped")

    engine.define(Car, "refund", lambda car: journal.append("refund"))
    engine.define(Car, "ship", ship)
    order = engine.define(Car, "order")

    @order.step
    def pay(car: Car, step: StepContext) -> None:
        journal.append("paid")
        step.compensate("refund")

    @order.step
    def deliver(car: Car, step: StepContext) -> None:
        step.do("ship")

    return order


def booking_that_charges_a_card(journal: list[str], *, seat_released_by_hand: bool) -> None:
    """``booking`` (timeout 5 s) holds a seat, undone by ``release_seat``: an outbound
    action completed by hand, or one that writes "released". It then charges the card
    through ``charge_card`` (outbound: it waits for its completion) and registers
    ``refund`` ("refunded") as that step's undo."""
    if seat_released_by_hand:
        engine.define(Car, "release_seat", lambda car: None, outbound=True)
    else:
        engine.define(Car, "release_seat", lambda car: journal.append("released"))
    engine.define(Car, "charge_card", lambda car: None, outbound=True)
    engine.define(Car, "refund", lambda car: journal.append("refunded"))
    booking = engine.define(Car, "booking", timeout=timedelta(seconds=5))

    @booking.step
    def hold(car: Car, step: StepContext) -> None:
        step.compensate("release_seat")

    @booking.step
    def pay(car: Car, step: StepContext) -> None:
        step.do("charge_card")
        step.compensate("refund")
