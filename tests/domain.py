"""The running example shared by the README and the tests: a Car that drives, visits,
honks. Tests declare the actions they need with ``engine.define`` (the registry is
restored after every test), like Stepped's tests reopen the class."""

from __future__ import annotations

from sqlalchemy import String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

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
