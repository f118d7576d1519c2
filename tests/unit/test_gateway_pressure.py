"""A viewer that falls behind (docs/gateway.md, "A viewer that falls behind"), and what its
run's viewers share (one encoding per record per format, one heartbeat): pure, no broker."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncGenerator, MutableMapping
from typing import Any

import orjson
import pytest

from symfonic_stream.config import Settings
from symfonic_stream.gateway import fanout
from symfonic_stream.gateway.app import GatewayState, create_app
from symfonic_stream.gateway.fanout import ENCODED, Pulse, Translation
from symfonic_stream.gateway.pressure import (
    CAPACITY,
    NEVER_SHED,
    POLICIES,
    Unit,
    squeeze,
)
from symfonic_stream.gateway.runs import Held, Run, RunStore
from symfonic_stream.gateway.sse import read_envelope
from symfonic_stream.gateway.viewer import (
    Item,
    Viewing,
    agui_messages,
    aisdk_messages,
    envelope_messages,
    records,
)
from symfonic_stream.models.event_types import Format
from symfonic_stream.observability.gateway import GatewayMetrics
from tests.unit.test_gateway_agui import FULL_RUN, envelopes

RUN = "run-p"
TYPED = POLICIES[("events", Format.ENVELOPE)]


def _env(seq: int, kind: str, **fields: Any) -> dict[str, Any]:
    if kind == "end":
        return {"run_id": RUN, "seq": seq, "source_index": seq, "ts": 1.0,
                "end": {"status": fields.get("status", "completed"), "error": None}}
    return {"run_id": RUN, "seq": seq, "source_index": seq, "ts": 1.0,
            "event": {"type": kind, **fields}}


def _units(envs: list[dict[str, Any]]) -> list[Unit]:
    return [Unit(e["seq"], [e], b"frame") for e in envs]


def _text(units: list[Unit], kind: str = "text_delta") -> str:
    return "".join(e["event"]["text"] for u in units for e in u.events
                   if e.get("event", {}).get("type") == kind)


def test_consecutive_text_deltas_become_one_message_under_the_last_seq() -> None:
    envs = [_env(0, "text_delta", text="Hel"), _env(1, "text_delta", text="lo"),
            _env(2, "text_delta", text=" you"), _env(3, "end")]
    out = squeeze(_units(envs), TYPED)
    assert [u.seq for u in out.units] == [2, 3]
    assert out.units[0].events == [_env(2, "text_delta", text="Hello you")]
    assert out.units[0].frame is None and out.units[1].frame == b"frame"  # (encoded again)
    assert (out.merged, out.shed) == (2, 0)


def test_only_deltas_of_one_part_merge() -> None:
    envs = [_env(0, "text_delta", text="a"), _env(1, "thinking_delta", text="b"),
            _env(2, "text_delta", text="c"),
            _env(3, "tool_call_delta", tool_call_id="x", args_delta='{"q"'),
            _env(4, "tool_call_delta", tool_call_id="y", args_delta='{"r"'),
            _env(5, "tool_call_delta", tool_call_id="y", args_delta=':1}'),
            _env(6, "text_delta", text=None), _env(7, "text_delta", text="d")]
    out = squeeze(_units(envs), TYPED)
    assert [u.seq for u in out.units] == [0, 1, 2, 3, 5, 6, 7]
    assert out.units[4].events[0]["event"]["args_delta"] == '{"r":1}'


def test_sheddable_events_are_dropped_and_counted_a_message_of_the_gateway_s_kept() -> None:
    truncated = Unit(None, [], b"event: truncated\n\n")
    units = [*_units([_env(0, "text_delta", text="a"), _env(1, "usage", input_tokens=1)]),
             truncated, *_units([_env(2, "text_delta", text="b"), _env(3, "usage"),
                                 _env(4, "text_delta", text="c")])]
    out = squeeze(units, TYPED)
    assert out.shed == 2
    # A shed event between two deltas does not keep them apart; the gateway's own does.
    assert [u.seq for u in out.units] == [0, None, 4]
    assert _text(out.units) == "abc"


def test_terminals_and_pauses_are_never_shed_whatever_the_order() -> None:
    rng = random.Random(49)
    kinds = ["text_delta", "thinking_delta", "usage", "ask_user", "interrupt",
             "response_complete", "tool_call_start", "tool_result", "end"]
    for _ in range(300):
        envs = []
        for seq in range(rng.randint(1, 40)):
            kind = rng.choice(kinds)
            fields = {"text": rng.choice(["x", "yy", ""])} if kind.endswith("delta") else {}
            envs.append(_env(seq, kind, **fields))
        out = squeeze(_units(envs), TYPED)
        kept = [e for u in out.units for e in u.events]
        for env in envs:
            name = TYPED.name(env)
            if name is None or name in ("ask_user", "interrupt", "response_complete",
                                         "tool_call_start", "tool_result"):
                assert env in kept  # every terminal, pause, end as it was
        assert out.shed == sum(TYPED.name(e) == "usage" for e in envs)
        assert _text(out.units) == _text(_units(envs))
        assert _text(out.units, "thinking_delta") == _text(_units(envs), "thinking_delta")
        seqs = [u.seq or 0 for u in out.units]
        assert seqs == sorted(set(seqs))  # ids only grow, each once


def test_no_policy_may_shed_a_terminal() -> None:
    for policy in POLICIES.values():
        assert not policy.sheddable & NEVER_SHED


def test_a_resume_from_any_coalesced_id_is_exact() -> None:
    """What a client got up to a coalesced message's id, and a resume after that id, make
    the run's text once: nothing lost, nothing twice."""
    rng = random.Random(7)
    envs = [_env(seq, rng.choice(["text_delta", "text_delta", "usage"]), text=f"<{seq}>")
            for seq in range(60)]
    out = squeeze(_units(envs), TYPED)
    whole = _text(_units(envs))
    for n, unit in enumerate(out.units):
        got = _text(out.units[:n + 1])
        rest = _text(_units([e for e in envs if e["seq"] > (unit.seq or -1)]))
        assert got + rest == whole


def _file(store: RunStore, env: dict[str, Any]) -> None:
    data = orjson.dumps(env)
    envelope = read_envelope(data)
    assert envelope is not None
    store.append(0, env["seq"], envelope, data)


class _Blocking:
    """An ASGI ``send`` whose body writes block until let go: a client slower than its run."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.sent = asyncio.Event()
        self.go = asyncio.Event()
        self.go.set()

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body":
            self.bodies.append(message["body"])
            self.sent.set()
            await self.go.wait()


async def test_a_viewer_under_pressure_gets_coalesced_text_every_terminal_and_a_count() -> None:
    store = RunStore(cache_bytes=10**8, max_runs=10)
    tails: Any = {s: _Tail(store) for s in ("events", "chunks")}
    state = GatewayState(Settings(), tails, GatewayMetrics())
    app = create_app(state)
    _file(store, _env(0, "text_delta", text="start "))
    send = _Blocking()
    scope = {"type": "http", "method": "GET", "path": f"/v1/runs/{RUN}/events",
             "raw_path": f"/v1/runs/{RUN}/events".encode(), "query_string": b"",
             "headers": [], "http_version": "1.1", "scheme": "http",
             "server": ("gw", 80), "client": ("c", 1), "root_path": ""}
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    served = asyncio.ensure_future(app(scope, receive, send))
    await asyncio.wait_for(send.sent.wait(), 10)  # the history: seq 0
    send.sent.clear()
    send.go.clear()  # the client stops reading
    _file(store, _env(1, "text_delta", text="live "))  # live now: the stream caught up
    await asyncio.wait_for(send.sent.wait(), 10)  # (the write of seq 1 waits)
    count = CAPACITY + 40  # what comes while it waits
    for seq in range(2, 2 + count):
        _file(store, _env(seq, "usage", input_tokens=seq) if seq % 10 == 0
              else _env(seq, "text_delta", text=f"{seq} "))
    last = 2 + count
    _file(store, _env(last, "ask_user", questions=["?"], interrupt_id="i", tool_call_id=None,
                      run_id=RUN, session_id=None, expires_at=1.0, resumable=True))
    _file(store, _env(last + 1, "end"))
    send.go.set()
    await asyncio.wait_for(served, 10)
    body = b"".join(send.bodies[2:])
    ids = [int(line[4:]) for line in body.split(b"\n") if line.startswith(b"id: ")]
    assert ids == [last - 1, last, last + 1]  # the deltas as one, the pause, the end
    text = orjson.loads(body.split(b"data: ")[1].split(b"\n")[0])["event"]["text"]
    assert text == "".join(f"{seq} " for seq in range(2, last) if seq % 10)
    shed = sum(1 for seq in range(2, last) if seq % 10 == 0)
    assert state.metrics.registry.get_sample_value(
        "symfonic_stream_gateway_shed_total", {"stream": "events"}) == shed
    assert state.metrics.registry.get_sample_value(
        "symfonic_stream_gateway_coalesced_total", {"stream": "events"}) == count - shed - 1
    assert state.metrics.registry.get_sample_value(
        "symfonic_stream_gateway_streams_total", {"stream": "events", "ending": "run_ended"}) == 1


async def test_a_burst_of_the_run_to_a_viewer_that_keeps_up_is_no_pressure() -> None:
    """A run that writes many records at once (a restarted projector catching up) is sent
    whole to a viewer that takes its writes: only what comes while a write waits counts."""
    store = RunStore(cache_bytes=10**8, max_runs=10)
    _file(store, _env(0, "text_delta", text="a"))
    run = store.get(RUN)
    assert run is not None
    viewing = Viewing()
    stream = envelope_messages(records(_Tail(store), run, -1, viewing),  # type: ignore[arg-type]
                               run, viewing)
    async with contextlib.aclosing(stream):
        got = [await anext(stream)]
        following = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0)  # (it waits for the run)
        for seq in range(1, 2 * CAPACITY):
            _file(store, _env(seq, "text_delta", text="b"))
        _file(store, _env(2 * CAPACITY, "end"))
        got.append(await following)
        got += [part async for part in stream]
    ids = [int(line[4:]) for line in b"".join(got).split(b"\n") if line.startswith(b"id: ")]
    assert ids == list(range(2 * CAPACITY + 1)) and viewing.merged == 0


class _Tail:
    def __init__(self, store: RunStore) -> None:
        self.store = store


async def _history(stream: AsyncGenerator[bytes, None]) -> bytes:
    async with contextlib.aclosing(stream):
        return b"".join([part async for part in stream])


def _held_run(envs: list[dict[str, Any]]) -> Run:
    store = RunStore(cache_bytes=10**8, max_runs=10)
    for env in envs:
        data = orjson.dumps(env)
        envelope = read_envelope(data)
        assert envelope is not None
        store.append(0, env["seq"], envelope, data)
    run = store.get(envs[0]["run_id"])
    assert run is not None
    return run


@pytest.mark.parametrize("wire", [Format.ENVELOPE, Format.AG_UI, Format.AI_SDK])
async def test_each_record_is_encoded_once_per_format_for_every_viewer(wire: Format) -> None:
    run = _held_run(envelopes(FULL_RUN))
    records_held = len(run.held)

    def viewer(shared: bool) -> AsyncGenerator[bytes, None]:
        viewing = Viewing()
        items = records(_Tail(RunStore(cache_bytes=1, max_runs=1)), run,  # type: ignore[arg-type]
                        -1, viewing)
        if wire is Format.ENVELOPE:
            return envelope_messages(items, run, viewing)
        if wire is Format.AG_UI:
            return agui_messages(items, run.run_id, -1, viewing, run=run if shared else None)
        return aisdk_messages(items, run, -1, viewing, message_id=run.run_id)

    before = ENCODED[wire]
    sent = [await _history(viewer(shared=True)) for _ in range(20)]
    assert ENCODED[wire] - before == records_held  # 20 viewers, each record encoded once
    assert len(set(sent)) == 1
    if wire is Format.AG_UI:  # the shared translation is what a viewer's own makes
        assert await _history(viewer(shared=False)) == sent[0]


async def test_a_viewer_takes_the_shared_translation_where_its_own_meets_it() -> None:
    """A viewer that translated its own way (a read-back) goes on with the run's shared
    translation where their states meet, and sends what a viewer from the start sends."""
    envs = envelopes(FULL_RUN)
    run = _held_run(envs)
    whole = await _history(agui_messages(_listed(run.held), run.run_id, -1, Viewing(), run=run))
    late = run.held[3:]  # (the first three came from Kafka, as a read-back's do)
    fresh = [Held(h.seq, h.name, h.data, h.closes) for h in run.held[:3]]
    before = ENCODED[Format.AG_UI]
    again = await _history(agui_messages(_listed(fresh + late), run.run_id, -1, Viewing(),
                                         run=run))
    assert again == whole
    assert ENCODED[Format.AG_UI] - before == 3  # its own three, then the run's


async def _listed(items: list[Held]) -> AsyncGenerator[list[Item], None]:
    yield list(items)


class _Stream:
    def __init__(self, run: Run, last_sent: float, sending_since: float | None) -> None:
        self.run, self.last_sent, self.sending_since = run, last_sent, sending_since
        self.ping_due = self.was_cut = False

    def cut(self) -> None:
        self.was_cut = True


def test_one_pulse_cuts_a_stuck_write_and_wakes_an_idle_stream_s_run() -> None:
    pulse = Pulse(heartbeat_s=15, send_timeout_s=10)
    idle_run, busy_run = _held_run([_env(0, "text_delta", text="a")]), Run("b", 0, 0, 0, 0)
    idle, stuck, fresh = (_Stream(idle_run, 0.0, None), _Stream(busy_run, 0.0, 1.0),
                          _Stream(busy_run, 99.0, None))
    pulse.streams |= {idle, stuck, fresh}
    woken = idle_run.changed
    pulse.tick(100.0)
    assert stuck.was_cut and not idle.was_cut and not fresh.was_cut
    assert idle.ping_due and not fresh.ping_due and woken.is_set()
    assert fanout.PING.startswith(b":")  # an SSE comment: no event, no id


def test_a_viewer_whose_place_in_the_shared_translation_is_gone_has_lost_it() -> None:
    """A viewer on the shared translation that meets a record it passed and memory no
    longer holds (a read-back's copy, untranslated) cannot go on: its stream ends."""
    run = _held_run(envelopes(FULL_RUN))
    ahead, behind = Translation(RUN, Format.AG_UI, run), Translation(RUN, Format.AG_UI, run)
    for held in run.held:
        assert ahead.of(held) is not None  # the run's shared translation, to the end
    assert behind.of(run.held[0]) is not None  # on the shared one, from its cached first
    again = run.held[1]
    assert behind.of(Held(again.seq, again.name, again.data, again.closes)) is None
    own = Translation(RUN, Format.AG_UI, None)  # (a viewer of its own never loses it)
    assert all(own.of(Held(h.seq, h.name, h.data, h.closes)) is not None for h in run.held)
