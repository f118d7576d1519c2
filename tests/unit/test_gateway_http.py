"""The gateway's HTTP edges without a broker: CORS (the preflight is the middleware's alone)
and the command's refusal of a bad setting."""

from __future__ import annotations

import httpx
import pytest

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


def test_the_gateway_command_refuses_a_bad_setting_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from symfonic_stream.cli import main

    monkeypatch.setenv("SYMFONIC_GATEWAY_MAX_CLIENTS", "0")
    result = CliRunner().invoke(main, ["gateway"])
    assert result.exit_code == 2
    assert "SYMFONIC_GATEWAY_MAX_CLIENTS" in result.output


def test_the_signal_that_stopped_the_server_is_not_raised_again() -> None:
    """uvicorn (0.29 and later) raises the SIGTERM it stopped on again once it has shut
    down, which ended the gateway before it closed its producer, with status -15: the
    gateway's server takes the signal and restores the handler it found, nothing more."""
    import signal

    import uvicorn
    from sse_starlette.sse import AppStatus

    from symfonic_stream.gateway.server import _Server

    called: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda sig, frame: called.append(sig))
    exiting = AppStatus.should_exit
    try:
        server = _Server(uvicorn.Config(app=lambda *args: None))
        handler = signal.getsignal(signal.SIGTERM)
        with server.capture_signals():
            signal.raise_signal(signal.SIGTERM)  # (caught: the server stops on it)
            assert server.should_exit
        assert called == [] and signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, before)
        # sse-starlette wraps uvicorn's handle_exit to end every event stream of the
        # process (AppStatus.should_exit); left set, later tests' streams end at once.
        AppStatus.should_exit = exiting
