"""The test kit (``symfonic_stream.testing``) held to the reference oracle.

Every expectation here comes from tests/reference (the oracle of contract §2-§5,
``oracle.py``, and of §7's tickets and verdicts, ``pauses.py``), which shares no code with
the package, never from the kit or the consumers it drives: the golden run and damaged
deliveries projected by the driver equal the oracle's envelopes byte for byte, also when
the consumers crash anywhere and restore from their changelogs, on one partition or
several; the dead letters are the oracle's, with the engine's headers; the verdicts on
answers, before and after a ticket expires, are the oracle's. The kit's own surface
(fixtures, fakes, the clock's rules) is checked last. The test of the documented API alone
is test_testing_kit_public.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from symfonic_stream.config import Settings
from symfonic_stream.models.dead_letter import HEADER_CONSUMER, HEADER_REASON, HEADER_SOURCE
from symfonic_stream.sdk import ReaderTimeout, RunReader, SequenceError
from symfonic_stream.testing import FakeReviewer, TopologyTestDriver
from tests.reference import oracle
from tests.reference.pauses import ACCEPTED, ReferenceReview
from tests.unit.helpers import interrupt, raw
from tests.unit.test_guard import damaged_delivery

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = (ROOT / "tests" / "golden" / "golden_run.jsonl").read_bytes().splitlines()
PROJECTIONS: dict[str, oracle.ProjectionName] = {"typed": "typed", "chunks": "chunks"}
TOPICS = {"typed": "symfonic.stream-events", "chunks": "symfonic.stream-chunks"}
#: Past every gap timeout, well before any idle timeout (the oracle has no clock: the end
#: of its input stands in for the gap timeout).
PAST_GAPS = Settings().gap_timeout_s + 5


def by_run(values: list[bytes]) -> dict[str, list[bytes]]:
    runs: dict[str, list[bytes]] = {}
    for value in values:
        runs.setdefault(json.loads(value)["run_id"], []).append(value)
    return runs


def expected(lines: list[bytes], projection: str) -> dict[str, list[bytes]]:
    envelopes, _ = oracle.project(lines, PROJECTIONS[projection])
    return by_run([oracle.encode(envelope) for envelope in envelopes])


def pipe_lines(driver: TopologyTestDriver, lines: list[bytes],
               crash_after: int | None = None) -> None:
    """Each line as a kernel's producer writes it (keyed by its run id), a crash of every
    consumer after line ``crash_after``."""
    for number, line in enumerate(lines, start=1):
        key = json.loads(line)["run_id"].encode()
        driver.pipe_record(key, line)
        if number == crash_after:
            driver.crash()


def projected(driver: TopologyTestDriver, projection: str) -> dict[str, list[bytes]]:
    return by_run([r.value or b"" for r in driver.records(TOPICS[projection])])


@pytest.mark.parametrize("projection", ["typed", "chunks"])
@pytest.mark.parametrize("crash_after", [None, *range(1, len(GOLDEN) + 1)])
def test_the_golden_run_projects_as_the_oracle_says_whenever_it_crashes(
        projection: str, crash_after: int | None) -> None:
    with TopologyTestDriver(projection) as driver:
        pipe_lines(driver, GOLDEN, crash_after)
        driver.advance(PAST_GAPS)
        assert projected(driver, projection) == expected(GOLDEN, projection)
        # The run's records as the run reader reads them: dense, through the pause.
        assert [r.seq for r in driver.run("golden-run", projection)] == list(
            range(len(expected(GOLDEN, projection)["golden-run"])))


@given(damaged_delivery(), st.integers(0, 60), st.sampled_from([1, 3]))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_damaged_deliveries_with_a_crash_anywhere_project_as_the_oracle_says(
        damaged: tuple[list[list[dict[str, Any]]], list[dict[str, Any]]], crash: int,
        partitions: int) -> None:
    _, delivered = damaged
    lines = [orjson.dumps(event) for event in delivered]
    with TopologyTestDriver("typed", partitions=partitions) as driver:
        pipe_lines(driver, lines, crash % (len(lines) + 1) or None)
        driver.advance(PAST_GAPS)
        assert projected(driver, "typed") == expected(lines, "typed")
        # The dead letters: the oracle's reasons, each the record whole, with where it came
        # from and who gave up on it.
        letters = driver.records("symfonic.dead-letter")
        _, dead = oracle.project(lines, "typed")
        assert sorted(r.header(HEADER_REASON) or b"" for r in letters) == sorted(
            reason.encode() for reason, _ in dead)
        assert all(r.header(HEADER_CONSUMER) == b"typed" for r in letters)
        for letter in letters:
            topic, partition, offset = (letter.header(HEADER_SOURCE) or b"").decode().split("/")
            [source] = [r for r in driver.records(topic)
                        if (r.partition, r.offset) == (int(partition), int(offset))]
            assert (letter.key, letter.value) == (source.key, source.value)


def test_a_hostile_record_is_dead_lettered_as_the_oracle_says() -> None:
    lines = [b'{"run_id":"run-1","index":0,"kind":"thinking","timestamp":1,"text":"a"}',
             b"not json", b'{"run_id":"run-1","index":"x","kind":"thinking","timestamp":1}']
    _, dead = oracle.project(lines, "typed")
    with TopologyTestDriver("typed") as driver:
        for line in lines:
            driver.pipe_record(b"run-1", line, headers=[("trace", b"t-1")])
        letters = driver.records("symfonic.dead-letter")
        assert [r.header(HEADER_REASON) for r in letters] == [r.encode() for r, _ in dead]
        assert all(r.header("trace") == b"t-1" for r in letters)  # kept whole
        assert projected(driver, "typed") == expected(lines, "typed")


# -- pauses: tickets, answers and verdicts ---------------------------------------------------


def paused(run_id: str, tenant: str, interrupt_id: str, token: str, expires_at: float
           ) -> dict[str, Any]:
    return raw("ask_user", 0, run_id, scope={"tenant": tenant},
               interrupt=interrupt(interrupt_id=interrupt_id, token=token, run_id=run_id,
                                   expires_at=expires_at))


def test_verdicts_before_and_after_an_expiry_are_the_oracles() -> None:
    review = ReferenceReview()
    events = [paused("run-a", "acme", "intr-a", "tok-a", 5000.0),
              paused("run-b", "beta", "intr-b", "tok-b", 1500.0)]
    answers: list[tuple[float, dict[str, Any]]] = [
        (1000.0, {"ticket_id": "intr-a", "token": "wrong"}),
        (1000.0, {"ticket_id": "intr-a", "token": "tok-a"}),
        (1000.0, {"ticket_id": "intr-a", "token": "tok-a"}),
        (1000.0, {"ticket_id": "nope", "token": "tok-a"}),
        (1600.0, {"ticket_id": "intr-b", "token": "tok-b"}),  # expired by then
    ]
    with TopologyTestDriver(start=1000.0) as driver:
        for event in events:
            review.pause(event)
            driver.pipe(event)
        assert sorted(t.ticket_id for t in driver.tickets()) == ["intr-a", "intr-b"]
        for moment, request in answers:
            driver.advance_to(moment)
            verdict, _run = review.answer(request, moment)
            outcome = driver.answer(request["ticket_id"], {"answers": ["yes"]},
                                    token=request["token"])
            assert (outcome.reason.value if outcome.reason else ACCEPTED) == verdict, request
        [resume] = driver.resumes()
        assert (resume.run_id, resume.tenant) == ("run-a", review.tenant_of("run-a"))
        # Each run's typed stream ends paused where the oracle's does.
        lines = [orjson.dumps(event) for event in events]
        assert projected(driver, "typed") == expected(lines, "typed")


def test_a_restored_validator_remembers_its_tickets_and_answers() -> None:
    review = ReferenceReview()
    event = paused("run-a", "acme", "intr-a", "tok-a", 5000.0)
    review.pause(event)
    with TopologyTestDriver(start=1000.0) as driver:
        driver.pipe(event)
        driver.crash("resumes")  # before the answer: the ticket from the changelog
        request = {"ticket_id": "intr-a", "token": "tok-a"}
        assert driver.answer("intr-a", True, token="tok-a").accepted == (
            review.answer(request, 1000.0)[0] == ACCEPTED)
        driver.crash()  # after it: the answer too
        verdict = driver.answer("intr-a", True, token="tok-a").reason
        assert verdict is not None and verdict.value == review.answer(request, 1000.0)[0]


# -- the fakes ---------------------------------------------------------------------------


async def test_the_fake_reviewer_works_a_queue_as_the_sdk_does(
        symfonic_driver: TopologyTestDriver, symfonic_reviewer: FakeReviewer) -> None:
    symfonic_driver.advance_to(1000.0)
    symfonic_driver.pipe(paused("run-a", "acme", "intr-a", "tok-a", 5000.0))
    seen = [ticket async for ticket in symfonic_reviewer.tickets("default")]
    assert [t.ticket_id for t in seen] == ["intr-a"]
    outcome = await symfonic_reviewer.answer(seen[0], {"answers": ["yes"]}, responder="pat")
    assert outcome.accepted and outcome.record["responder"] == "pat"
    await symfonic_reviewer.commit()
    assert [t async for t in symfonic_reviewer.tickets("default")] == []  # handled
    async with symfonic_driver.resume_reader(lambda run_id: "acme") as resumes:
        assert [r.ticket_id async for r in resumes] == ["intr-a"]


async def test_the_fake_run_reader_reads_and_checks_as_the_sdk_does(
        symfonic_driver: TopologyTestDriver,
        symfonic_run_reader: Callable[..., RunReader]) -> None:
    for line in GOLDEN:
        symfonic_driver.pipe_record(b"golden-run", line)
    async with symfonic_run_reader("golden-run") as reader:  # up to the pause
        first = [record.seq async for record in reader]
    assert first[-1] == next(json.loads(v)["seq"] for v in expected(GOLDEN, "typed")["golden-run"]
                         if json.loads(v).get("end", {}).get("status") == "paused")
    with pytest.raises(ReaderTimeout):  # the hole is not timed out yet: nothing more
        async with symfonic_run_reader("golden-run", follow=True) as reader:
            [record async for record in reader]
    # A repeat of seq is the reader's error, as on Kafka.
    symfonic_driver.pipe_record(b"golden-run",
                                symfonic_driver.records(TOPICS["typed"])[0].value,
                                topic="symfonic.stream-events")
    with pytest.raises(SequenceError):
        symfonic_driver.advance(PAST_GAPS)
        symfonic_driver.run("golden-run")


# -- the driver's own rules ---------------------------------------------------------------


def test_the_clock_only_moves_on_and_a_closed_driver_says_so() -> None:
    driver = TopologyTestDriver("copier", start=10.0)
    with pytest.raises(ValueError, match="only moves on"):
        driver.advance(-1)
    with pytest.raises(ValueError, match="only moves on"):
        driver.advance_to(5.0)
    copied = driver.pipe_record(b"k", b"v", headers=[("h", b"1")])
    [out] = driver.read("symfonic.copier-output")
    assert (out.key, out.value, out.headers, out.timestamp) == (b"k", b"v", (("h", b"1"),),
                                                                 10_000)
    assert copied.offset == 0 and driver.read("symfonic.copier-output") == []
    with pytest.raises(KeyError):
        driver.crash("typed")  # not one of this driver's
    with pytest.raises(ValueError, match="run `resumes`"):
        driver.answer("intr-1", True, token="t")
    driver.close()
    with pytest.raises(RuntimeError, match="closed"):
        driver.pipe_record(b"k", b"v")


def test_an_unknown_consumer_is_named() -> None:
    with pytest.raises(KeyError, match="nope"):
        TopologyTestDriver("nope")


def test_the_public_test_imports_only_the_documented_kit() -> None:
    """test_testing_kit_public.py is the kit as its users have it: of the package, it
    imports ``symfonic_stream.testing`` alone."""
    import ast

    tree = ast.parse((Path(__file__).parent / "test_testing_kit_public.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
    assert {name for name in imported if name and name.startswith("symfonic_stream")} == {
        "symfonic_stream.testing"}


# -- docs/testing-your-code.md ---------------------------------------------------------------

DOC = ROOT / "docs" / "testing-your-code.md"


def doc_examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_docs_examples_pass_as_a_users_pytest_modules(tmp_path: Path) -> None:
    """Each python block of the page is a pytest module of a user's project: run as such,
    in a directory of its own (no conftest of ours), the plugin loaded as the entry point
    loads it, the settings the defaults."""
    for number, block in enumerate(doc_examples()):
        (tmp_path / f"test_example_{number}.py").write_text(block)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYMFONIC_")}
    env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "symfonic_stream.testing.plugin", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    tests = sum(block.count("\ndef test_") + block.count("\nasync def test_")
                for block in doc_examples())
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{tests} passed" in result.stdout, result.stdout


def test_an_idle_run_is_abandoned_when_the_clock_says_as_the_contract_says() -> None:
    """docs/contract.md decision 13, stated here (the oracle has no clock): after
    ``SYMFONIC_RUN_IDLE_TIMEOUT_S`` without an event, an ``abandoned`` end with
    ``source_index`` null and the last event's ``ts``; a later event is ``run_closed``."""
    lines = [orjson.dumps(raw("text_delta", 0, text="a")),
             orjson.dumps(raw("text_delta", 1, text="b"))]
    [before] = expected(lines, "typed").values()
    with TopologyTestDriver("typed", start=5000.0) as driver:
        for line in lines:
            driver.pipe_record(b"run-1", line)
        idle = driver.settings.run_idle_timeout_s
        driver.advance(idle - 1)
        assert [r.value for r in driver.records(TOPICS["typed"])] == before
        driver.advance(2)
        abandoned = oracle.encode({"run_id": "run-1", "seq": len(before), "source_index": None,
                                   "ts": 101.0, "end": {"status": "abandoned", "error": None}})
        assert [r.value for r in driver.records(TOPICS["typed"])] == [*before, abandoned]
        driver.pipe(raw("text_delta", 2, text="c"))
        [letter] = driver.records("symfonic.dead-letter")
        assert letter.header(HEADER_REASON) == b"run_closed"


def test_a_bad_setting_is_named_and_leaves_no_thread(tmp_path: Path) -> None:
    import threading

    before = threading.active_count()
    with pytest.raises(Exception, match="SYMFONIC_ROUTING_RULES"):
        TopologyTestDriver("pauses", settings=Settings(routing_rules=tmp_path / "missing.yaml"))
    assert threading.active_count() == before


def test_a_processor_that_raises_is_rolled_back_and_its_record_dead_lettered() -> None:
    """docs/engine.md, "Failures": a processor that raises on a record fails its task, which
    goes back to its last commit; on the retry the record is dead-lettered
    ``invalid_event`` with the exception in the detail, and the partition goes on."""
    from symfonic_stream.consumers import Consumer, Engine, Wiring, Write
    from symfonic_stream.engine.processor import Collector, InputRecord
    from symfonic_stream.models.dead_letter import HEADER_DETAIL
    from symfonic_stream.models.topics import AGENT_EVENTS, COPIER_OUTPUT
    from symfonic_stream.processors.copier import Copier

    class Fragile(Copier):
        def process(self, record: InputRecord, now: float, out: Collector) -> None:
            if record.value == b"boom":
                raise ValueError("cannot copy boom")
            super().process(record, now, out)

    fragile = Consumer(
        name="fragile", title="a copier that raises", summary="", metrics_port=9499,
        engines=(Engine(name="fragile", reads=AGENT_EVENTS,
                        writes=(Write(COPIER_OUTPUT, "copies"),),
                        wire=lambda settings, names: Wiring(
                            lambda partition: Fragile(names.copier_output))),),
        scales_on="fragile", resources=None)
    with TopologyTestDriver(fragile) as driver:
        for value in (b"a", b"boom", b"b"):
            driver.pipe_record(b"k", value)
        assert [r.value for r in driver.records("symfonic.copier-output")] == [b"a", b"b"]
        [letter] = driver.records("symfonic.dead-letter")
        assert (letter.value, letter.header(HEADER_REASON)) == (b"boom", b"invalid_event")
        assert b"cannot copy boom" in (letter.header(HEADER_DETAIL) or b"")


def test_the_entry_point_loads_the_plugin_once_beside_the_projects_own(tmp_path: Path) -> None:
    """pyproject.toml's ``pytest11`` entry point, as an install registers it (a dist-info on
    the path stands in for the install; the shared venv is not touched): in a user's
    directory it gives the fixtures; in this project, where ``addopts`` also names the
    plugin and the project's conftest loads, it is registered once and the tests pass."""
    import tomllib

    [(name, target)] = tomllib.loads((ROOT / "pyproject.toml").read_text())[
        "project"]["entry-points"]["pytest11"].items()
    info = tmp_path / "site" / "symfonic_kit_probe-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: symfonic-kit-probe\n"
                                   "Version: 0.0\n")
    (info / "entry_points.txt").write_text(f"[pytest11]\n{name} = {target}\n")
    user = tmp_path / "user"
    user.mkdir()
    (user / "test_user.py").write_text(
        "def test_it(symfonic_driver):\n    assert symfonic_driver.topics() == []\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYMFONIC_")}
    env["PYTHONPATH"] = f"{tmp_path / 'site'}{os.pathsep}{ROOT}"
    for cwd, args in ((user, ["test_user.py"]),
                      (ROOT, ["tests/unit/test_testing_kit_public.py"])):
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--trace-config",
             *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
            check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.count("PLUGIN registered: <module 'symfonic_stream.testing."
                                   "plugin'") == 1, result.stdout
        assert "1 passed" in result.stdout


@pytest.mark.parametrize("half", [3, 6, 9])
def test_a_new_driver_on_anothers_broker_goes_on_from_its_changelogs(half: int) -> None:
    with TopologyTestDriver("typed", "chunks", partitions=2) as first:
        pipe_lines(first, GOLDEN[:half])
    with TopologyTestDriver("typed", "chunks", broker=first.broker) as second:
        pipe_lines(second, GOLDEN[half:])
        second.advance(PAST_GAPS)
        for projection in PROJECTIONS:
            assert projected(second, projection) == expected(GOLDEN, projection)
