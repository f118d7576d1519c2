"""The demo: synthetic kernel runs through the real pipeline, with a readable summary.

It is a list of steps (:data:`STEPS`) over one :class:`DemoContext`; each step is an async
function of the context. Consumers are real processes (``symfonic-stream run <name>``),
started with a fresh topic prefix (``symfonic-demo-<timestamp>``) so reruns never collide.
The pause router and the resume validator run beside the projectors; a step answers one
routed pause with the reviewer SDK (:mod:`symfonic_stream.tools.demo.pauses`).

Latency is end to end: every event is stamped with the wall clock when it is published
(the kernel timestamp), and measured again when its output record is read back with
``read_committed``, i.e. once the projector's transaction is visible to consumers.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from symfonic_stream.app.topics import required_topics
from symfonic_stream.config import Settings
from symfonic_stream.kafka.admin import Admin, ensure_topics
from symfonic_stream.kafka.clients import client_kwargs, plain_producer_kwargs
from symfonic_stream.kafka.retry import KafkaUnavailable
from symfonic_stream.runtime.workers import free_port
from symfonic_stream.sdk.publisher import EventPublisher
from symfonic_stream.tools.demo.context import DemoContext, DemoOptions, OutputStats
from symfonic_stream.tools.demo.pauses import answer_a_pause
from symfonic_stream.tools.demo.report import closing, print_summary, render_run
from symfonic_stream.tools.demo.review import (
    AUDIENCE,
    answer_through_the_console,
    reviewer_token,
)
from symfonic_stream.tools.synthetic import Damage, RunShape, deliver, generate_run, interleave

__all__ = ["STEPS", "DemoContext", "DemoOptions", "run_demo"]

#: Raw records no projector can use, published around the validating publisher to show
#: the dead-letter path: (description, key, value).
BAD_RECORDS: tuple[tuple[str, bytes, bytes], ...] = (
    ("not JSON", b"demo-bad-1", b"{not json"),
    ("index is a string", b"demo-bad-2",
     b'{"run_id":"demo-bad-2","index":"0","kind":"text_delta","timestamp":1.0}'),
    ("key differs from run_id", b"demo-bad-3",
     b'{"run_id":"someone-else","index":0,"kind":"text_delta","timestamp":1.0}'),
)


Step = tuple[str, Callable[[DemoContext], Awaitable[None]]]


# -- steps ---------------------------------------------------------------------------


async def ensure_demo_topics(ctx: DemoContext) -> None:
    report = await ensure_topics(ctx.settings, required_topics(ctx.settings))
    if not report.ok:
        raise RuntimeError("; ".join(report.mismatches))
    ctx.console.print(
        f"  {len(report.created)} topics created with prefix {ctx.settings.topic_prefix}"
    )


async def start_consumers(ctx: DemoContext) -> None:
    env = {
        **os.environ,
        "SYMFONIC_TOPIC_PREFIX": ctx.settings.topic_prefix,
        "SYMFONIC_GAP_TIMEOUT_S": str(ctx.options.gap_timeout_s),
        "SYMFONIC_PARTITIONS": str(ctx.settings.partitions),
    }
    for consumer in ctx.consumers:
        port = free_port()
        with (ctx.log_dir / f"{consumer}.log").open("wb") as log:
            ctx.processes[consumer] = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "symfonic_stream", "run", consumer,
                env={**env, "SYMFONIC_METRICS_PORT": str(port)},
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
            )
        ctx.metrics_ports[consumer] = port
    deadline = time.monotonic() + 90
    for consumer, port in ctx.metrics_ports.items():
        while (await _http_get(port, "/readyz"))[0] != 200:
            process = ctx.processes[consumer]
            if process.returncode is not None:
                raise RuntimeError(
                    f"consumer {consumer} exited with {process.returncode}; "
                    f"see {ctx.log_dir / (consumer + '.log')}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumer {consumer} not ready after 90 s")
            await asyncio.sleep(0.3)
        ctx.console.print(f"  {consumer} ready (pid {ctx.processes[consumer].pid})")


async def start_gateway(ctx: DemoContext) -> None:
    """The SSE gateway beside the consumers, with tokens (a key of the demo's own: answers
    need them), its page's URL for a run about to start and its review console's. An
    extra: when it cannot start (its port taken), the demo goes on without it."""
    port = ctx.settings.gateway_port or free_port()
    metrics_port = free_port()
    key = secrets.token_urlsafe(32)
    env = {
        **os.environ,
        "SYMFONIC_TOPIC_PREFIX": ctx.settings.topic_prefix,
        "SYMFONIC_GATEWAY_HOST": os.environ.get("SYMFONIC_GATEWAY_HOST", "127.0.0.1"),
        "SYMFONIC_GATEWAY_PORT": str(port),
        "SYMFONIC_METRICS_PORT": str(metrics_port),
        "SYMFONIC_GATEWAY_AUTH": "jwt",
        "SYMFONIC_GATEWAY_JWT_KEY": key,
        "SYMFONIC_GATEWAY_JWT_AUDIENCE": AUDIENCE,
    }
    log_path = ctx.log_dir / "gateway.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "symfonic_stream", "gateway",
            env=env, stdout=log, stderr=asyncio.subprocess.STDOUT,
        )
    ctx.processes["gateway"] = process
    deadline = time.monotonic() + 90
    while (await _http_get(metrics_port, "/readyz"))[0] != 200:
        if process.returncode is not None or time.monotonic() > deadline:
            ctx.console.print(f"  [yellow]the gateway did not start[/] (port {port} taken? "
                              f"SYMFONIC_GATEWAY_PORT sets it); see {log_path}")
            return
        await asyncio.sleep(0.3)
    ctx.metrics_ports["gateway"] = metrics_port
    ctx.gateway_port, ctx.gateway_key = port, key
    lifetime_s = ctx.settings.gateway_jwt_max_lifetime_s
    reader = reviewer_token(key, lifetime_s, reviews=False)
    # (the console's token in the fragment, which the browser never sends)
    ctx.gateway_urls = [f"http://127.0.0.1:{port}/?run={_run_id(ctx.options, 0)}"
                        f"&access_token={reader}",
                        f"http://127.0.0.1:{port}/review#access_token="
                        f"{reviewer_token(key, lifetime_s)}"]
    ctx.console.print(f"  gateway ready (pid {process.pid}), on port {port}")


async def publish_and_watch(ctx: DemoContext) -> None:
    """Publish the synthetic runs while reading the outputs back as they commit."""
    ctx.events = _synthetic_events(ctx.options, ctx.run_ids, ctx.lost)
    ctx.outputs = {topic: OutputStats() for topic in ctx.output_topics}
    progress = Progress(
        TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=ctx.console,
    )
    with progress:
        published = progress.add_task("events published", total=len(ctx.events))
        ended = {
            topic: progress.add_task(f"{consumer}: runs ended", total=len(ctx.run_ids))
            for topic, consumer in ctx.output_topics.items()
        }
        stop, all_ended = asyncio.Event(), asyncio.Event()

        def on_end(topic: str) -> None:
            progress.update(ended[topic], completed=len(ctx.outputs[topic].ended))
            if _all_ended(ctx):
                all_ended.set()

        watcher = asyncio.create_task(_watch(ctx, stop, on_end))
        try:
            async with EventPublisher(ctx.settings, client_name="demo") as publisher:
                ctx.published_from = time.time()
                started = time.monotonic()
                for n, event in enumerate(ctx.events, start=1):
                    await publisher.send(_stamped(event))
                    if n % 50 == 0 or n == len(ctx.events):
                        progress.update(published, completed=n)
                        # At --rate: ahead of it, wait; behind, go on at once.
                        await asyncio.sleep(max(0.0, n / ctx.options.rate
                                                - (time.monotonic() - started)))
            await _publish_bad_records(ctx)
            ended_task = asyncio.create_task(all_ended.wait())
            await asyncio.wait(
                {ended_task, watcher},
                timeout=ctx.options.timeout_s,
                return_when=asyncio.FIRST_COMPLETED,
            )
            ended_task.cancel()
            ctx.complete = _all_ended(ctx)
            await asyncio.sleep(1.0)  # let the dead letters of the bad records land
        finally:
            stop.set()
            await watcher


async def scrape_metrics(ctx: DemoContext) -> None:
    for consumer, port in ctx.metrics_ports.items():
        status, body = await _http_get(port, "/metrics")
        if status == 200:
            ctx.metrics[consumer] = body.decode()


async def summarize(ctx: DemoContext) -> None:
    print_summary(ctx)


async def render_example(ctx: DemoContext) -> None:
    await render_run(ctx)


async def finish(ctx: DemoContext) -> None:
    """What still runs and the next command; with --keep-running, wait for Ctrl-C."""
    for line in closing(ctx, keeping=ctx.options.keep_running):
        ctx.console.print(line, markup=False, highlight=False, soft_wrap=True)
    if ctx.options.keep_running:
        await asyncio.gather(*(process.wait() for process in ctx.processes.values()))


STEPS: list[Step] = [
    ("ensure topics", ensure_demo_topics),
    ("start consumers", start_consumers),
    ("start the gateway", start_gateway),
    ("publish synthetic runs", publish_and_watch),
    ("answer a pause as a reviewer", answer_a_pause),
    ("answer a pause through the console", answer_through_the_console),
    ("scrape metrics", scrape_metrics),
    ("summary", summarize),
    ("one run, rendered", render_example),
    ("done", finish),
]


async def run_demo(options: DemoOptions, settings: Settings, console: Console) -> DemoContext:
    """Run every step; consumers started here are always stopped, whatever happened, and the
    topics deleted unless kept (SIGTERM, like Ctrl-C, ends the steps and does both)."""
    prefix = options.prefix or f"symfonic-demo-{time.strftime('%Y%m%d-%H%M%S')}"
    ctx = DemoContext(options, settings.model_copy(update={"topic_prefix": prefix}), console)
    loop, main = asyncio.get_running_loop(), asyncio.current_task()
    if main is not None:
        loop.add_signal_handler(signal.SIGTERM, main.cancel)
    try:
        for title, step in STEPS:
            console.rule(title, align="left")
            await step(ctx)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        await stop_consumers(ctx)
        if not options.keep_topics:
            await delete_demo_topics(ctx)
            if options.keep_running:  # (the closing said so otherwise)
                console.print(f"stopped; the demo's topics ({prefix}.*) are deleted",
                              markup=False)
    return ctx


async def stop_consumers(ctx: DemoContext) -> None:
    """SIGTERM (graceful: the batch in flight commits), then SIGKILL after 30 s."""
    for process in ctx.processes.values():
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
    for process in ctx.processes.values():
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.kill()
            await process.wait()


async def delete_demo_topics(ctx: DemoContext) -> None:
    """Every topic of the demo's prefix (a broker already gone leaves them, said so)."""
    names = [spec.name for spec in required_topics(ctx.settings)]
    try:
        async with Admin(ctx.settings) as admin:
            await admin.call("deleting the demo's topics", lambda c: c.delete_topics(names))
    except (KafkaError, KafkaUnavailable, OSError) as exc:
        ctx.console.print(f"the demo's topics were not deleted: {exc}", markup=False,
                          soft_wrap=True)


# -- helpers -------------------------------------------------------------------------


def _synthetic_events(
    options: DemoOptions, run_ids: list[str], lost: dict[str, int]
) -> list[dict[str, Any]]:
    """Runs with every ending, duplicates, reordering, and a few lost events (gaps): each
    run's id is appended to ``run_ids``, each lost index put in ``lost``."""
    rng = random.Random(options.seed)
    shape = RunShape(min_events=8, max_events=options.max_events)
    # The first runs end each way for sure; the rest by the generator's odds.
    short = min(30, options.max_events)  # short enough to read when rendered
    forced = [
        RunShape(8, short, pause_share=1.0),
        RunShape(8, short, pause_share=0.0, error_share=1.0),
        RunShape(8, short, pause_share=0.0, error_share=0.0, cancel_share=1.0),
    ]
    runs = []
    for n in range(options.runs):
        run_id = _run_id(options, n)
        run_ids.append(run_id)
        events = generate_run(rng, run_id, shape=forced[n] if n < len(forced) else shape)
        delivered = deliver(rng, events, Damage())
        if n % 33 == 5 and len(events) > 4:  # lose one event: a gap after the timeout
            lost[run_id] = events[len(events) // 2]["index"]
            delivered = [e for e in delivered if e["index"] != lost[run_id]]
        runs.append(delivered)
    return list(interleave(rng, runs))


def _run_id(options: DemoOptions, n: int) -> str:
    return f"demo-{options.seed}-{n:05d}"


def _stamped(event: dict[str, Any]) -> dict[str, Any]:
    """The event as a kernel would emit it now: latency is measured from this timestamp."""
    now = time.time()
    stamped = {**event, "timestamp": now}
    if event.get("interrupt"):
        stamped["interrupt"] = {**event["interrupt"], "expires_at": now + 3600.0}
    return stamped


async def _publish_bad_records(ctx: DemoContext) -> None:
    producer = AIOKafkaProducer(**plain_producer_kwargs(ctx.settings, "demo-bad"))
    await producer.start()
    try:
        for _, key, value in BAD_RECORDS:
            await producer.send_and_wait(ctx.names.agent_events, value=value, key=key)
            ctx.bad_published += 1
    finally:
        await producer.stop()


def _all_ended(ctx: DemoContext) -> bool:
    return all(len(stats.ended) >= len(ctx.run_ids) for stats in ctx.outputs.values())


async def _watch(ctx: DemoContext, stop: asyncio.Event, on_end: Callable[[str], None]) -> None:
    """Read the outputs and the dead letters back, read_committed, as they commit."""
    consumer = AIOKafkaConsumer(
        *ctx.output_topics, ctx.names.dead_letter,
        **client_kwargs(ctx.settings, "demo-watch"),
        group_id=None, auto_offset_reset="earliest", isolation_level="read_committed",
    )
    await consumer.start()
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=200)
            now = time.time()
            for tp, records in batch.items():
                if tp.topic == ctx.names.dead_letter:
                    for record in records:
                        headers = dict(record.headers)
                        ctx.dead_letters[headers.get("symfonic-dlq-reason", b"?").decode()] += 1
                    continue
                stats = ctx.outputs[tp.topic]
                for record in records:
                    envelope = orjson.loads(record.value)
                    if "event" in envelope:
                        stats.by_type[envelope["event"]["type"]] += 1
                        stats.latencies[ctx.phase(envelope, stats)].append(now - envelope["ts"])
                    elif "end" in envelope:
                        stats.by_type["end_" + envelope["end"]["status"]] += 1
                        stats.latencies[ctx.phase(envelope, stats)].append(now - envelope["ts"])
                        stats.ended.add(envelope["run_id"])
                    else:
                        stats.by_type["gap"] += 1  # its ts is the event after the hole
                        stats.gaps_read[envelope["run_id"]] = now
                on_end(tp.topic)
    finally:
        await consumer.stop()


async def _http_get(port: int, path: str) -> tuple[int, bytes]:
    """A minimal GET against a consumer's health server; (0, b"") when it does not answer."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
    except (OSError, TimeoutError):
        return 0, b""
    try:
        request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        writer.write(request.encode())
        await writer.drain()
        response = await asyncio.wait_for(reader.read(), 5)
    except (OSError, TimeoutError):
        return 0, b""
    finally:
        writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    parts = head.split(b" ", 2)
    return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0), body
