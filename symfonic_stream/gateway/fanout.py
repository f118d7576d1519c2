"""What every viewer of a run shares: each record encoded once per format, and one
heartbeat for every stream of the process (docs/gateway.md, "Finding a run fast, and
fan-out").

* **The envelope format**: a record's SSE message is encoded once, at the first viewer that
  sends it, and kept on the held record (:func:`frame`) for every other viewer.
* **AG-UI and the AI SDK**: the translation is deterministic from the run's start, so the
  run's viewers share one translator per format (:class:`Shared`): each record is
  translated and encoded once, at the first viewer that reaches it, and kept on the held
  record. A viewer starts with a translator of its own (it replays the run from its start,
  maybe read back from Kafka) and takes the shared one where its state is the shared one's:
  at a record the shared translation already holds, or where the shared one stands at the
  record before (:class:`Translation`). A viewer that needs a record the shared translation
  passed and memory no longer holds has lost its place: its stream ends (``too_slow``), and
  its client resumes by ``Last-Event-ID``.
* **The heartbeat** (:class:`Pulse`): one timer for every stream, which wakes the streams
  that sent nothing for ``SYMFONIC_GATEWAY_HEARTBEAT_S`` to send an SSE comment, cuts those
  whose write has waited longer than ``SYMFONIC_GATEWAY_SEND_TIMEOUT_S``, and ends them all
  at shutdown.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from symfonic_stream.gateway import agui, aisdk
from symfonic_stream.gateway.runs import Held, Run
from symfonic_stream.gateway.sse import message
from symfonic_stream.models.event_types import Format

Event = dict[str, Any]
#: Records encoded (or translated and encoded), per format, in this process: what the tests
#: count to see one encoding per record per format however many viewers.
ENCODED: Counter[Format] = Counter()
#: The heartbeat's SSE comment.
PING = b": ping\n\n"


def frame(held: Held) -> bytes:
    """``held``'s SSE message in the envelope format, encoded once for every viewer."""
    if held.frame is None:
        held.frame = message(held.seq, held.name, held.data)
        ENCODED[Format.ENVELOPE] += 1
    return held.frame


class Translator(Protocol):
    def translate(self, envelope: dict[str, Any]) -> list[Event]: ...


@dataclass(frozen=True, slots=True)
class _Wire:
    make: Callable[[str], Translator]
    encode: Callable[[list[Event], int], bytes]


_WIRES: dict[Format, _Wire] = {Format.AG_UI: _Wire(agui.AgUiRun, agui.sse),
                               Format.AI_SDK: _Wire(aisdk.AiSdkRun, aisdk.sse)}


@dataclass(slots=True)
class Encoded:
    """One record translated: its events, their SSE messages, and (the AI SDK) the
    ``finish`` of a response that ends at it, a paused end."""

    events: list[Event]
    frame: bytes
    finish: Event | None = None


@dataclass(slots=True)
class Shared:
    """A run's one translation into one format: the translator, and the seq of the record
    it translated last (its state is the run's up to there)."""

    translator: Translator
    last: int


class Translation:
    """One viewer's translation of a run into ``wire``: its own translator until its state
    is the shared one's, then the shared one (module docstring)."""

    def __init__(self, run_id: str, wire: Format, run: Run | None) -> None:
        """``run``: the run whose translation its viewers share (None: this viewer's own)."""
        self._run, self._wire, self._how = run, wire, _WIRES[wire]
        self._own: Translator | None = self._how.make(run_id)
        #: The seq of the record it translated (or took translated) last.
        self._last = -1

    def of(self, held: Held) -> Encoded | None:
        """``held`` translated, the next record of the run after the last one asked for;
        None: the shared translation passed it and it is no longer held (the place lost)."""
        wire, run = self._wire, self._run
        cached = held.translated.get(wire) if held.translated is not None else None
        if cached is not None:
            self._own, self._last = None, held.seq
            return cached  # type: ignore[no-any-return]
        translations = getattr(run, "translations", None)  # (a stand-in run may have none)
        shared = translations.get(wire) if translations is not None else None
        if shared is None and self._own is not None and run is not None:
            # the first to translate the run: its translator becomes the run's
            shared = Shared(self._own, self._last)
            if translations is None:
                translations = run.translations = {}
            translations[wire] = shared
        if shared is not None and shared.last == self._last:
            self._own, self._last = None, held.seq
            shared.last = held.seq
            encoded = self._encode(shared.translator, held)
            if held.translated is None:
                held.translated = {}
            held.translated[wire] = encoded
            return encoded
        if self._own is None:
            return None
        self._last = held.seq
        return self._encode(self._own, held)

    def _encode(self, translator: Translator, held: Held) -> Encoded:
        events = translator.translate(orjson.loads(held.data))
        finish = (translator.paused_finish()
                  if isinstance(translator, aisdk.AiSdkRun) and held.name == "end"
                  and not held.closes else None)
        ENCODED[self._wire] += 1
        return Encoded(events, self._how.encode(events, held.seq), finish)


class Beat(Protocol):
    """What the heartbeat sees of one stream."""

    run: Run
    #: ``time.monotonic()`` of its last write, and of the start of the write it waits in
    #: (None: it waits for no write).
    last_sent: float
    sending_since: float | None
    ping_due: bool

    def cut(self) -> None:
        """Its write waited too long: end it (``too_slow``)."""


class Pulse:
    """One timer for every run stream of the process (module docstring). Its task runs
    while a stream is joined."""

    def __init__(self, heartbeat_s: float, send_timeout_s: float) -> None:
        self.heartbeat_s, self.send_timeout_s = heartbeat_s, send_timeout_s
        self.tick_s = min(heartbeat_s, send_timeout_s) / 4
        self.streams: set[Beat] = set()
        self.stopping = False
        #: Whether the server is shutting down (uvicorn's ``should_exit``, which a signal
        #: sets): then :meth:`stop`, at the next tick.
        self.exiting: Callable[[], bool] = lambda: False
        self._task: asyncio.Task[None] | None = None

    def join(self, stream: Beat) -> None:
        self.streams.add(stream)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._beat(), name="pulse")

    def leave(self, stream: Beat) -> None:
        self.streams.discard(stream)

    def stop(self) -> None:
        """Shutdown: every stream ends after its current write."""
        self.stopping = True
        for run in {id(stream.run): stream.run for stream in self.streams}.values():
            run.wake()

    def tick(self, now: float) -> None:
        """Cut the streams whose write waited past the send timeout; wake those that sent
        nothing for a heartbeat (each run once)."""
        due: dict[int, Run] = {}  # (by identity: a run is no hashable value)
        for stream in list(self.streams):
            if stream.sending_since is not None:
                if now - stream.sending_since > self.send_timeout_s:
                    stream.cut()
            elif now - stream.last_sent >= self.heartbeat_s and not stream.ping_due:
                stream.ping_due = True
                due[id(stream.run)] = stream.run
        for run in due.values():
            run.wake()

    async def _beat(self) -> None:
        while self.streams:
            await asyncio.sleep(self.tick_s)
            if self.exiting() and not self.stopping:
                self.stop()
            self.tick(time.monotonic())
