"""What building the gateway's AG-UI events from the ``ag-ui-protocol`` models would cost
(issue 38): the same run translated to SSE bytes two ways.

    python -m bench.agui [--events 2000] [--repeat 5]

* ``dicts``: what the gateway does, :class:`~symfonic_stream.gateway.agui.AgUiRun`'s dicts
  encoded by orjson (:func:`~symfonic_stream.gateway.agui.sse`);
* ``models``: each of those events made the protocol's model (``ag_ui.core.Event``, the
  discriminated union, validated) and encoded by pydantic (``model_dump_json(by_alias=True,
  exclude_none=True)``), as building them from the models would.

The run: the typed envelopes of a synthetic run (text deltas mostly, thinking, tool calls
and results, usage, its end), the shape a viewer reads. Each viewer translates its run
itself (a thousand viewers of a run translate it a thousand times), so the cost is per
event per viewer. CPU seconds of the process (``time.process_time``), best of
``--repeat``; the output is also checked equal event for event (same JSON objects).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

import orjson
from ag_ui.core import Event
from pydantic import TypeAdapter

from symfonic_stream.gateway.agui import AgUiRun, sse
from symfonic_stream.tools.offline import project_lines
from symfonic_stream.tools.synthetic import RunShape, generate_run

EVENT: TypeAdapter[Any] = TypeAdapter(Event)


def envelopes(count: int) -> list[dict[str, Any]]:
    """A synthetic run's typed envelopes, about ``count`` of them."""
    rng = random.Random(38)
    events = generate_run(rng, "bench-agui", shape=RunShape(count, count, pause_share=0.0,
                                                            error_share=0.0, cancel_share=0.0))
    return [orjson.loads(output.value or b"")
            for collector in project_lines((orjson.dumps(e) for e in events), "typed")
            for output in collector.outputs]


def with_dicts(run: list[dict[str, Any]]) -> list[bytes]:
    translation = AgUiRun("bench-agui")
    return [sse(translation.translate(envelope), envelope["seq"]) for envelope in run]


def with_models(run: list[dict[str, Any]]) -> list[bytes]:
    translation = AgUiRun("bench-agui")
    out = []
    for envelope in run:
        events = [EVENT.validate_python(event) for event in translation.translate(envelope)]
        if not events:
            out.append(b"")
            continue
        parts = [b"data: %s\n\n" % e.model_dump_json(by_alias=True, exclude_none=True).encode()
                 for e in events[:-1]]
        last = events[-1].model_dump_json(by_alias=True, exclude_none=True).encode()
        parts.append(b"id: %d\ndata: %s\n\n" % (envelope["seq"], last))
        out.append(b"".join(parts))
    return out


def cpu_seconds(work: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


def _objects(messages: list[bytes]) -> list[Any]:
    return [orjson.loads(line[6:]) for message in messages
            for line in message.split(b"\n") if line.startswith(b"data: ")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    run = envelopes(args.events)
    assert _objects(with_dicts(run)) == _objects(with_models(run)), "not the same events"
    events = len(_objects(with_dicts(run)))
    dicts = cpu_seconds(lambda: with_dicts(run), args.repeat)
    models = cpu_seconds(lambda: with_models(run), args.repeat)
    print(f"{len(run)} envelopes, {events} AG-UI events, best of {args.repeat}")
    print(f"{'how':<7} {'CPU s':>8} {'µs/event':>9} {'ratio':>6}")
    for name, seconds in (("dicts", dicts), ("models", models)):
        print(f"{name:<7} {seconds:8.4f} {seconds / events * 1e6:9.2f} {seconds / dicts:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
