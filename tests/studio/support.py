"""Helpers for the studio's tests: a test client that signs in and sends commands with the
CSRF token, and a parser of the forms a page renders. Fixtures are in conftest.py."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from app.security import csrf

#: The headers htmx sends with a request for part of a page.
HTMX = {"HX-Request": "true"}

PASSWORD = "correct horse battery staple"


class StudioClient(FlaskClient):
    """``client.login(name)``, ``client.command(url, data)`` (a POST with this session's CSRF
    token, as htmx by default), ``client.csrf_token()``."""

    def csrf_token(self) -> str:
        """This session's token, as the page's forms and ``hx-headers`` carry it."""
        with self.session_transaction() as session:
            token = session.get(csrf.SESSION_KEY)
            if not isinstance(token, str):
                token = session[csrf.SESSION_KEY] = secrets.token_urlsafe(32)
            return token

    def login(self, name: str, password: str = PASSWORD, **form: str) -> TestResponse:
        self.get("/login")
        return self.post(
            "/login", data={"name": name, "password": password, "csrf_token": self.csrf_token(), **form}
        )

    def command(
        self, url: str, data: dict[str, Any] | None = None, *, htmx: bool = True, **options: Any
    ) -> TestResponse:
        headers = {**(HTMX if htmx else {}), **options.pop("headers", {})}
        return self.post(
            url, data={**(data or {}), "csrf_token": self.csrf_token()}, headers=headers, **options
        )


@dataclass
class Form:
    method: str
    action: str
    attributes: dict[str, str]
    inputs: dict[str, str] = field(default_factory=dict)


class FormParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[Form] = []
        self._open: Form | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "form":
            self._open = Form(values.get("method", "get").lower(), values.get("action", ""), values)
            self.forms.append(self._open)
        elif tag in ("input", "textarea", "select") and self._open is not None and "name" in values:
            self._open.inputs[values["name"]] = values.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._open = None


def forms(html: str) -> list[Form]:
    """Every form of a page, with its attributes and named inputs."""
    parser = FormParser()
    parser.feed(html)
    return parser.forms
