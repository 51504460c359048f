"""Browsers ask for ``/favicon.ico`` where a page names no icon (``/api/openapi.json``):
anyone gets the studio's SVG icon, with its type, cached for a day (no 404, no sign-in).

Not a spec case: the studio is ours (issue 12, the browser pass: a 404 on JSON pages).
"""

from __future__ import annotations

from pathlib import Path

from tests.studio.support import StudioClient

ICON = Path(__file__).resolve().parents[2] / "static" / "favicon.svg"


def test_anyone_gets_the_icon_as_svg_cached_for_a_day(client: StudioClient) -> None:
    answer = client.get("/favicon.ico")

    assert answer.status_code == 200
    assert answer.mimetype == "image/svg+xml"
    assert answer.data == ICON.read_bytes()
    assert answer.cache_control.public and answer.cache_control.max_age == 86_400


def test_a_signed_in_user_gets_it_too(viewer_client: StudioClient) -> None:
    answer = viewer_client.get("/favicon.ico")

    assert answer.status_code == 200 and answer.mimetype == "image/svg+xml"
