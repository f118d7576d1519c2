"""Every python block of the documentation, run against the broker as a user would run it:
copied into a file and started with the environment's ``SYMFONIC_*`` settings (a fresh topic
prefix per test). What each prints is held to what the reference oracle says.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import orjson

from symfonic_stream.models.names import TopicNames
from symfonic_stream.runtime.workers import free_port
from tests.reference import oracle
from tests.unit.test_docs_snippets import python_block

from .harness import (
    ConsumerProcess,
    TopicReader,
    consumer_env,
    create_topics,
    produce,
    unique_prefix,
)

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
