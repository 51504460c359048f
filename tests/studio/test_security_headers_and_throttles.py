"""Given any answer of the studio, then it carries the security headers: a
Content-Security-Policy with nothing inline and no eval, never framed, no MIME sniffing, no
referrer to other sites. Given repeated failed sign-ins, then they are refused with a 429
that says when to try again, per user name and per address; the webhooks are rate limited.

Not a spec case: issue 12, "Never a 500, and hardened".
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from flask import Flask

from app.security import hardening as security
from app.security import users
from tests.studio.conftest import MakeUser
from tests.studio.support import PASSWORD, StudioClient
from tests.studio.support_webhooks import deliver

ROOT = Path(__file__).resolve().parents[2]
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.DOTALL)

PAGES = (
    "/",
    "/actions/",
    "/lanes/",
    "/achievements/",
    "/catalog/",
    "/audit/",
    "/actions/4242",  # a 404 page
    "/api/actions",  # JSON
    "/static/app.css",
    "/static/studio.js",
)


def policy(answer: object) -> dict[str, str]:
    header = answer.headers["Content-Security-Policy"]  # type: ignore[attr-defined]
    return {d.split()[0]: " ".join(d.split()[1:]) for d in header.split("; ")}


@pytest.mark.parametrize("path", PAGES)
def test_every_answer_carries_the_security_headers(viewer_client: StudioClient, path: str) -> None:
    answer = viewer_client.get(path)

    directives = policy(answer)
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert directives["object-src"] == "'none'"
    assert "unsafe-inline" not in answer.headers["Content-Security-Policy"]
    assert "unsafe-eval" not in answer.headers["Content-Security-Policy"]
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.headers["Referrer-Policy"] == "same-origin"
    assert answer.headers["X-Frame-Options"] == "DENY"


def test_the_sign_in_page_and_the_webhook_carry_them_too(client: StudioClient) -> None:
    for answer in (client.get("/login"), client.post("/webhooks/complete", data=b"{}")):
        assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]
        assert answer.headers["X-Content-Type-Options"] == "nosniff"


def test_no_template_writes_what_the_policy_would_block() -> None:
    """Inline scripts, handlers, style attributes and eval'd htmx expressions would be blocked
    by the browser (and so silently break): they live in static/*.js and static/*.css."""
    found = []
    patterns = {
        "inline script": re.compile(r"<script(?![^>]*\bsrc=)[^>]*>"),
        "style attribute": re.compile(r"\sstyle=\""),
        "on* handler": re.compile(r"\son[a-z]+=\""),
        "hx-on": re.compile(r"\shx-on[:-]"),
        "js: expression": re.compile(r"(hx-vals|hx-vars)=['\"](js|javascript):"),
        "trigger filter": re.compile(r"hx-trigger=\"[^\"]*\["),
    }
    for path in sorted((ROOT / "templates").rglob("*.html")):
        # The HTML only: Jinja's own tags (a macro's style="danger" argument) are not markup.
        text = JINJA.sub(" ", path.read_text())
        for name, pattern in patterns.items():
            for match in pattern.finditer(text):
                found.append(f"{path.relative_to(ROOT)}: {name}: {match.group(0)!r}")
    assert found == []


def test_htmx_runs_without_eval(viewer_client: StudioClient) -> None:
    page = viewer_client.get("/").text
    assert '"allowEval": false' in page
    assert '<script src="/static/studio.js" defer></script>' in page


def test_a_polling_fragment_pauses_through_the_static_script_not_an_inline_filter() -> None:
    script = (ROOT / "static" / "studio.js").read_text()
    assert "htmx:beforeRequest" in script and "visibilitychange" in script
    macros = (ROOT / "templates" / "macros.html").read_text()
    assert 'data-poll hx-get="{{ url }}" hx-trigger="every {{ every }}, stepwise:visible"' in macros


# --- the sign-in throttle --------------------------------------------------------------------------


def sign_in(client: StudioClient, name: str, password: str, address: str) -> object:
    client.get("/login", environ_base={"REMOTE_ADDR": address})
    return client.post(
        "/login",
        data={"name": name, "password": password, "csrf_token": client.csrf_token()},
        environ_base={"REMOTE_ADDR": address},
    )


def test_failed_sign_ins_for_one_name_are_throttled_with_a_429_that_says_when_to_retry(
    app: Flask, client: StudioClient, make_user: MakeUser
) -> None:
    # Given olga's name tried with wrong passwords from many addresses, up to the limit
    make_user("olga", users.OPERATOR)
    make_user("ann", users.OPERATOR)
    for n in range(5):
        assert sign_in(client, "olga", "wrong", f"10.0.0.{n}").status_code == 401  # type: ignore[attr-defined]

    # When one more try comes, even with the right password
    refused = sign_in(client, "OLGA", PASSWORD, "10.0.1.1")

    # Then it is refused, saying when to try again
    assert refused.status_code == 429  # type: ignore[attr-defined]
    retry = int(refused.headers["Retry-After"])  # type: ignore[attr-defined]
    assert 0 < retry <= 300
    assert re.search(r"Too many failed sign-ins for this name: try again in \d+ seconds?\.", refused.text)  # type: ignore[attr-defined]
    # and another user, from the same address, is not affected
    assert sign_in(client, "ann", PASSWORD, "10.0.1.1").status_code == 302  # type: ignore[attr-defined]


def test_failed_sign_ins_from_one_address_are_throttled_whatever_the_name(
    app: Flask, client: StudioClient, make_user: MakeUser
) -> None:
    make_user("olga", users.OPERATOR)
    for n in range(20):
        assert sign_in(client, f"nobody{n}", "wrong", "10.9.9.9").status_code == 401  # type: ignore[attr-defined]

    refused = sign_in(client, "olga", PASSWORD, "10.9.9.9")

    assert refused.status_code == 429  # type: ignore[attr-defined]
    assert "Too many failed sign-ins from your address" in refused.text  # type: ignore[attr-defined]
    assert "Retry-After" in refused.headers  # type: ignore[attr-defined]
    # Another address signs olga in
    assert sign_in(client, "olga", PASSWORD, "10.9.9.10").status_code == 302  # type: ignore[attr-defined]


def test_successful_sign_ins_are_not_counted(app: Flask, client: StudioClient, make_user: MakeUser) -> None:
    make_user("olga", users.OPERATOR)
    for _ in range(12):
        assert sign_in(client, "olga", PASSWORD, "10.1.1.1").status_code == 302  # type: ignore[attr-defined]


def test_the_limits_come_from_the_configuration(
    app: Flask, client: StudioClient, make_user: MakeUser
) -> None:
    app.config["STEPWISE_LOGIN_LIMIT_PER_USER"] = "1 per hour"
    make_user("olga", users.OPERATOR)
    assert sign_in(client, "olga", "wrong", "10.2.2.2").status_code == 401  # type: ignore[attr-defined]
    refused = sign_in(client, "olga", "wrong", "10.2.2.3")
    assert refused.status_code == 429  # type: ignore[attr-defined]
    assert int(refused.headers["Retry-After"]) > 3000  # type: ignore[attr-defined]


def test_the_webhooks_are_rate_limited_per_address(app: Flask, client: StudioClient) -> None:
    app.config["STEPWISE_WEBHOOK_LIMIT"] = "3 per minute"
    for _ in range(3):
        assert deliver(client, {"id": "x"}).status_code == 422

    refused = deliver(client, {"id": "x"})

    assert refused.status_code == 429
    assert refused.json is not None
    assert refused.json["error"] == "Too Many Requests"
    assert re.fullmatch(r"Too many requests: try again in \d+ seconds?\.", refused.json["message"])
    assert "Retry-After" in refused.headers


def test_ids_beyond_a_bigint_are_not_found_not_an_overflow(viewer_client: StudioClient) -> None:
    for path in (
        "/actions/99999999999999999999",
        "/audit/99999999999999999999",
        "/api/actions/9223372036854775808",
    ):
        assert viewer_client.get(path).status_code == 404, path
    assert security.MAX_ID == 9223372036854775807
