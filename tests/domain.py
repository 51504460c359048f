"""The running example shared by the README and the tests: a Car that drives, visits,
honks. Tests declare the actions they need with ``engine.define`` (the registry is
restored after every test), like Stepped's tests reopen the class."""

from __future__ import annotations

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from engine import Actor


class AppBase(DeclarativeBase):
    pass


class Car(Actor, AppBase):
    __tablename__ = "cars"

    id: Mapped[int] = mapped_column(primary_key=True)
    mileage: Mapped[int] = mapped_column(default=0)
    honks: Mapped[int] = mapped_column(default=0)
    oinks: Mapped[int] = mapped_column(default=0)
    befores: Mapped[int] = mapped_column(default=0)
    location: Mapped[str | None] = mapped_column(String(100))

    def drive(self, miles: int) -> None:
        self.mileage += miles

    def honk(self) -> None:
        self.honks += 1

    def oink(self) -> None:
        self.oinks += 1

    def change_location(self, location: str) -> None:
        self.location = location

    def breakdown(self) -> None:
        raise RuntimeError("breakdown")


class Account(Actor, AppBase):
    __tablename__ = "accounts"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), default="account")

    def fly(self) -> None:
        pass

    def action1(self) -> None:
        pass


class Fleet(Actor, AppBase):
    """An actor whose class loads a collection with a join (``lazy="joined"``)."""

    __tablename__ = "fleets"

    id: Mapped[int] = mapped_column(primary_key=True)
    vans: Mapped[list[Van]] = relationship(lazy="joined", order_by="Van.id")


class Van(AppBase):
    __tablename__ = "vans"

    id: Mapped[int] = mapped_column(primary_key=True)
    fleet_id: Mapped[int] = mapped_column(ForeignKey("fleets.id"))
