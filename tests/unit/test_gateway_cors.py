"""``SYMFONIC_GATEWAY_CORS_ORIGINS``: which other origins' pages may read the streams
(the routes' answers need a broker; the CORS preflight is the middleware's alone)."""

from __future__ import annotations

import httpx

from symfonic_stream.config import Settings
from symfonic_stream.gateway.app import GatewayState, create_app
from symfonic_stream.observability.gateway import GatewayMetrics

PREFLIGHT = {"Access-Control-Request-Method": "GET",
             "Access-Control-Request-Headers": "last-event-id"}


async def _preflight(origins: str, origin: str) -> httpx.Response:
    state = GatewayState(Settings(gateway_cors_origins=origins), {}, GatewayMetrics())
    transport = httpx.ASGITransport(app=create_app(state))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        return await client.options("/v1/runs/r/events", headers={"Origin": origin, **PREFLIGHT})


async def test_a_listed_origin_may_read_with_last_event_id() -> None:
    answer = await _preflight("https://ui.example.com, https://ops.example.com",
                              "https://ops.example.com")
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == "https://ops.example.com"
    assert "last-event-id" in answer.headers["access-control-allow-headers"].lower()


async def test_another_origin_is_not_allowed() -> None:
    answer = await _preflight("https://ui.example.com", "https://evil.example.net")
    assert "access-control-allow-origin" not in answer.headers


async def test_no_origins_means_same_origin_only() -> None:
    answer = await _preflight("", "https://ui.example.com")
    assert "access-control-allow-origin" not in answer.headers
