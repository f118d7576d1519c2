"""The gateway's built-in page as served (no broker; tests/browser runs it in Chromium)."""

from __future__ import annotations

import re

import httpx
from starlette.applications import Starlette
from starlette.routing import Route

from symfonic_stream.gateway.page import page


async def test_the_page_is_served_self_contained() -> None:
    app = Starlette(routes=[Route("/", page, methods=["GET"])])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://gateway") as client:
        response = await client.get("/?run=r1")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert "default-src 'none'" in response.headers["content-security-policy"]
    html = response.text
    assert "new EventSource(" in html and "es.close()" in html
    # no external resource: nothing loaded from another origin, and no HTML built from data
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "innerHTML" not in html and "insertAdjacentHTML" not in html
