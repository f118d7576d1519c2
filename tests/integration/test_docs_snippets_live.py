"""The documentation's blocks that need a broker, run against it as a user would run them.

Every python block: copied into a file and started with the environment's ``SYMFONIC_*``
settings (a fresh topic prefix per test); what each prints is held to what the reference
oracle says. The command blocks (tests/docs_blocks.py's :class:`Session`): the README's
`make demo` and its by-hand block, which must end with the gateway answering at the URL the
README gives; running a consumer (engine.md), the gateway (gateway.md), and the tools'
sessions (tools.md), each printing what its page shows. The README's and the pages' blocks
use the documented default ports (8400, 9400, 9405): those tests share one xdist group, and
each first checks that nothing else holds them.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest

from symfonic_stream.models.names import TopicNames
from symfonic_stream.runtime.workers import free_port
from tests.docs_blocks import ROOT, Session, checkout_view, command_block, tool_env
from tests.reference import oracle
from tests.unit.test_docs_snippets import python_block

from .harness import (
    BOOTSTRAP,
    ConsumerProcess,
    TopicReader,
    consumer_env,
    create_topics,
    produce,
    unique_prefix,
)

#: The ports the documented blocks use as written: the gateway's, typed's and the gateway's
#: metrics (docs/configuration.md).
DOCUMENTED_PORTS = (8400, 9400, 9405)
documented_ports = pytest.mark.xdist_group("documented-ports")

PUBLISHER = ("tools.md", "async with EventPublisher() as publisher:")
READER = ("tools.md", 'async with RunReader("run-1", follow=False, idle_timeout_s=60) as reader:')
REVIEWER = ("pauses.md", 'async with Reviewer("symfonic-review.acme.ui") as reviewer:')
RESUMES = ("tools.md", 'async with ResumeReader("kernel-1", owner) as resumes:')


async def start_block(block: tuple[str, str], prefix: str, tmp_path: Path,
                      ) -> asyncio.subprocess.Process:
    script = tmp_path / f"{block[0].removesuffix('.md')}-{time.monotonic_ns()}.py"
    script.write_text(python_block(*block))
    env = consumer_env(prefix, metrics_port=free_port())
    return await asyncio.create_subprocess_exec(
        sys.executable, str(script), cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def run_block(block: tuple[str, str], prefix: str, tmp_path: Path) -> str:
    """Run the block to its end; its standard output (it must exit 0)."""
    process = await start_block(block, prefix, tmp_path)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    assert b"Unclosed" not in err, err.decode()
    return out.decode()


async def test_the_publisher_then_the_reader_example(tmp_path: Path) -> None:
    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    typed = ConsumerProcess("typed", prefix, tmp_path).start()
    try:
        await typed.wait_ready()
        published = await run_block(PUBLISHER, prefix, tmp_path)
        assert published == "invalid_event index: Input should be a valid integer\n"
        read = await run_block(READER, prefix, tmp_path)
    finally:
        typed.stop()
    # What the oracle makes of the two events the publisher sent (times aside).
    sent = [{"run_id": "run-1", "index": 0, "kind": "text_delta", "timestamp": 1.0,
             "text": "Hello"}, {"run_id": "run-1", "index": 1, "kind": "done",
                                "timestamp": 2.0}]
    envelopes, _ = oracle.project([orjson.dumps(e) for e in sent], "typed")
    expected = [f"{e['seq']} {e['event']['type']}" if "event" in e
                else f"ended: {e['end']['status']}" for e in envelopes]
    assert read.splitlines() == expected


async def test_the_reviewer_example_answers_a_ticket_and_the_kernels_reader_takes_it(
        tmp_path: Path) -> None:
    """The reviewer's example answers acme's ticket; the kernel's resume reader example
    skips a resume of the run that is not acme's (as another tenant's would be) and takes
    acme's (contract §9)."""
    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    consumers = [ConsumerProcess(name, prefix, tmp_path).start() for name in ("pauses", "resumes")]
    reviewer = None
    try:
        await asyncio.gather(*(c.wait_ready() for c in consumers))
        ask = {"run_id": "ask-run", "index": 0, "kind": "ask_user", "timestamp": time.time(),
               "scope": {"tenant": "acme", "principal": "ana"},
               "interrupt": {"name": "ask_user", "kind": "ask_user",
                             "payload": {"questions": ["Refund the shipping fee?"]},
                             "token": "tok-1", "interrupt_id": "intr-1", "run_id": "ask-run",
                             "expires_at": time.time() + 3600, "resumable": True}}
        # Before the answer, a resume of the run that is not acme's: the kernel skips it.
        forged = {"ticket_id": "intr-1", "run_id": "ask-run", "tool_call_id": None,
                  "interrupt_id": "intr-1", "answer": {"approved": False}, "responder": "eve",
                  "answered_at": time.time(), "tenant": "globex", "request_id": None}
        await produce(names.resumes, [(b"ask-run", orjson.dumps(forged),
                                       [("symfonic-tenant", b"globex")])])
        await produce(names.agent_events, [(b"ask-run", orjson.dumps(ask), [])])
        reviewer = await start_block(REVIEWER, prefix, tmp_path)
        assert reviewer.stdout is not None
        # The example loops over its queue for ever: read its two lines for the one ticket.
        ticket = await asyncio.wait_for(reviewer.stdout.readline(), 120)
        verdict = await asyncio.wait_for(reviewer.stdout.readline(), 60)
        assert ticket.decode().split()[:2] == ["ask-run", "ask_user"]
        assert verdict == b"accepted\n"
        async with TopicReader(names.resumes) as resumes:
            [_, accepted] = await resumes.until(2, within=30)
        resume = orjson.loads(accepted.value or b"")
        assert (resume["answer"], resume["tenant"]) == ({"approved": True}, "acme")
        assert dict(accepted.headers)["symfonic-tenant"] == b"acme"
        taken = await run_block(RESUMES, prefix, tmp_path)
        assert taken == "ask-run intr-1 {'approved': True}\n"
    finally:
        if reviewer is not None and reviewer.returncode is None:
            reviewer.terminate()
            await reviewer.wait()
        for consumer in consumers:
            consumer.stop()


def _documented_ports_free() -> None:
    for port in DOCUMENTED_PORTS:
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0, (
                f"port {port} is in use on this machine: the documented blocks need it")


def _session_env(prefix: str, **settings: str) -> dict[str, str]:
    return tool_env(bootstrap_servers=BOOTSTRAP, topic_prefix=prefix, partitions="2",
                    **settings)


async def _get(url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.get(url)


@documented_ports
async def test_the_readme_by_hand_block(tmp_path: Path) -> None:
    """As written, in a directory with the checkout's .venv and tests/ (a short gap timeout
    in the environment: the README's 30 s is the default's). The gateway must still answer
    at the URL the README gives after the block, beside typed, each on its own port."""
    _documented_ports_free()
    prefix = unique_prefix()
    block = command_block("README.md", ".venv/bin/symfonic-stream topics ensure")
    session = Session([block], checkout_view(tmp_path), _session_env(prefix, gap_timeout_s="2"),
                      prefix)
    async with session as ran:
        session.check()
        tail, sse = ran[3].output, ran[-1].output
        assert tail[0].startswith("run golden-run  (from seq 0") and tail[-1] == "■ run completed"
        assert "⚠ gap: kernel index 9 never arrived" in tail
        assert "event: gap" in sse and [line for line in sse if line][-2] == "event: end", sse
        page = await _get("http://localhost:8400/?run=golden-run")
        ready = [await _get(f"http://127.0.0.1:{port}/readyz") for port in (9400, 9405)]
    assert page.status_code == 200 and "<html" in page.text.lower()
    assert [r.status_code for r in ready] == [200, 200], [r.text for r in ready]


@documented_ports
async def test_make_demo(tmp_path: Path) -> None:
    """The README's first block, `make demo`, against the test broker (make neither starts
    nor stops it), with a few runs and a free port for its gateway (DEMO_ARGS and the
    settings in the environment)."""
    block = command_block("README.md", "make demo")
    env = {**_session_env("symfonic", gateway_port="0"), "COLUMNS": "80",
           "DEMO_ARGS": "--runs 20 --max-events 30", "TMPDIR": str(tmp_path)}
    del env["SYMFONIC_TOPIC_PREFIX"]  # (the demo makes its own)
    session = Session([block], ROOT, env, timeout_s=400)
    async with session as ran:
        session.check()
    out = ran[0].output
    assert "make: using the Kafka at" in out[0]
    summary = out[out.index(next(line for line in out if line.startswith("summary "))):]
    assert "  runs ended" in "\n".join(summary) and "Stopped: " in "\n".join(summary)
    assert out[-2:] == ["  make demo DEMO_ARGS=--keep-running", out[-1]], out[-3:]


@documented_ports
async def test_running_a_consumer(tmp_path: Path) -> None:
    _documented_ports_free()
    prefix = unique_prefix()
    session = Session([command_block("engine.md", "symfonic-stream run typed &")],
                      tmp_path, _session_env(prefix), prefix)
    async with session:
        session.check()


@documented_ports
async def test_the_gateway_example(tmp_path: Path) -> None:
    """run-42's first event as the page shows it, from the gateway started as written."""
    _documented_ports_free()
    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    typed = ConsumerProcess("typed", prefix, tmp_path).start()
    try:
        await typed.wait_ready()
        base = {"run_id": "run-42", "timestamp": 1764600000.1}
        await produce(TopicNames(prefix).agent_events, [
            (b"run-42", orjson.dumps({**base, "index": 0, "kind": "text_delta", "text": "Hel"}),
             []),
            (b"run-42", orjson.dumps({**base, "index": 1, "kind": "done"}), [])])
        session = Session([command_block("gateway.md", "symfonic-stream gateway &")],
                          tmp_path, _session_env(prefix), prefix)
        async with session:
            session.check()
    finally:
        typed.stop()


async def test_the_tools_page(tmp_path: Path) -> None:
    """tools.md's sessions in order, as one reader types them: publish (the golden run and
    two bad lines), its dry run, tail, tail --json, replay; a live typed projector (with a
    short gap timeout) projects what is published."""
    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    typed = ConsumerProcess("typed", prefix, tmp_path, gap_timeout_s=2).start()
    try:
        await typed.wait_ready()
        shown = [command_block("tools.md", naming) for naming in (
            "symfonic-stream publish runs.jsonl", "symfonic-stream publish --json --dry-run",
            "symfonic-stream tail golden-run --follow", "symfonic-stream tail golden-run --json",
            "symfonic-stream replay")]
        session = Session(shown, checkout_view(tmp_path / "reader"), _session_env(prefix),
                          prefix)
        async with session:
            session.check()
    finally:
        typed.stop()
