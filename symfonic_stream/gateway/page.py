"""``GET /``: the gateway's built-in page, one run watched live in a browser.

``/?run=RUN_ID`` opens ``EventSource('v1/runs/RUN_ID/events')`` and shows the run's text,
thinking, tool calls, pauses, gaps and end as they come (``static/index.html``: inline CSS
and JS, no external resource, no build step). The page is package data, read once.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

#: Nothing but the page itself and its own origin's streams: every value shown is written
#: as text, and this keeps a mistake there from loading or sending anything elsewhere.
_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
}


@cache
def _html() -> bytes:
    return files("symfonic_stream.gateway").joinpath("static").joinpath("index.html").read_bytes()


async def page(request: Request) -> Response:
    return HTMLResponse(_html(), headers=_HEADERS)
