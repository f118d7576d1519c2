"""The pause router and the resume validator against a model of docs/pauses.md: a state
machine (hypothesis) over pauses, re-sends, closed runs, answers, a clock that moves and
restarts from the changelogs.

The model is written from docs/pauses.md, not from the code:

- a ticket's expiry is the kernel's ``expires_at``, but at most the router's ticket
  lifetime after its event's timestamp (or after now, if the event is from our future),
  and again at most the validator's own lifetime after it registered the ticket;
- a ticket already expired when routed goes to the expired queue (``expires_at <= now``);
- a run id is its first event's tenant's (contract §9): another tenant's event under it
  is dead-lettered ``foreign_tenant``, and makes no ticket and closes nothing;
- the router routes a (tenant, interrupt id) of a run once while it remembers the run: a
  run that closed for the grace after it closed, an open one until the latest of: the
  grace after its last pause ended (its expiry, or when it was routed if that is later),
  twice the grace after the guard stops waiting for that pause (its kernel expiry, at
  most 24 idle timeouts), and an idle timeout plus the grace after its last event (moved
  ahead by an idle timeout and an eighth at a time);
- the validator registers a (tenant, ticket id) once while it remembers it: until its
  expiry, its answer or its registration, whichever is last, plus the grace;
- an answer is checked in contract §7's order: unknown ticket (none remembered of that id, of
  the tenant the request names if it names one), bad token (none of those tickets has its
  token, or several do), expired (``expires_at <= now``), already answered, accepted.

Every step's outputs are compared with the model's. Both processors use deliberately
different lifetimes, so each cap is the one that bites in some run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from symfonic_stream.engine.processor import Collector, InputRecord, OutputRecord
from symfonic_stream.models.names import TopicNames
from symfonic_stream.processors.pauses.router import PauseRouter
from symfonic_stream.processors.pauses.rules import parse_rules
from symfonic_stream.processors.pauses.validator import ResumeValidator
from symfonic_stream.state.store import StorePartition
from tests.unit.helpers import interrupt, raw, restore_from, store_contents, write_changes

NAMES = TopicNames("m")
RULES = parse_rules("rules: []")  # every ticket to the default queue
ROUTER_LIFETIME = 40.0
VALIDATOR_LIFETIME = 30.0
GRACE = 10.0
IDLE = 16.0
START = 1000.0

Key = tuple[str | None, str]  # (tenant, interrupt id)

tenants = st.sampled_from([None, "acme", "globex"])
interrupt_ids = st.sampled_from(["i1", "i2"])
run_ids = st.sampled_from(["r1", "r2"])
tokens = st.sampled_from(["t1", "t2"])
#: Offsets on one grid, so that expiries, routing times and answers meet exactly.
offsets = st.sampled_from([-50.0, -30.0, -10.0, 0.0, 10.0, 30.0])
lifetimes = st.sampled_from([-5.0, 0.0, 10.0, 30.0, 40.0, 1e12])
steps = st.sampled_from([0.0, 1.0, 5.0, 10.0, 20.0, 28.0, 30.0, 40.0])


@dataclass
class RunModel:
    owner: str | None
    routed: set[Key] = field(default_factory=set)
    closed_at: float | None = None
    forget_at: float = 0.0

    def deadline(self) -> float:
        return self.closed_at + GRACE if self.closed_at is not None else self.forget_at


@dataclass
class TicketModel:
    run_id: str
    token: str
    expires_at: float
    registered_at: float
    answered_at: float | None = None

    def deadline(self) -> float:
        return max(self.expires_at, self.answered_at or 0.0, self.registered_at) + GRACE


class PauseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = START
        self.offset = 0
        self.router = self._router()
        self.validator = self._validator()
        self.router_log: dict[bytes, bytes | None] = {}
        self.validator_log: dict[bytes, bytes | None] = {}
        self.runs: dict[str, RunModel] = {}
        self.tickets: dict[Key, TicketModel] = {}

    @staticmethod
    def _router(tracked: bool = True) -> PauseRouter:
        router = PauseRouter(NAMES, RULES, tenant_queues=False, grace_s=GRACE,
                             max_lifetime_s=ROUTER_LIFETIME, idle_timeout_s=IDLE)
        return _tracked(router) if tracked else router

    @staticmethod
    def _validator(tracked: bool = True) -> ResumeValidator:
        validator = ResumeValidator(NAMES, grace_s=GRACE, max_lifetime_s=VALIDATOR_LIFETIME)
        return _tracked(validator) if tracked else validator

    # -- feeding the processors, as the engine would (one commit per step) -----------

    def _record(self, topic: str, key: str | None, value: bytes,
                headers: tuple[tuple[str, bytes], ...] = ()) -> InputRecord:
        self.offset += 1
        return InputRecord(topic, 0, self.offset, None if key is None else key.encode(),
                           value, headers)

    def _route(self, event: dict[str, Any], foreign: bool = False) -> list[OutputRecord]:
        out = Collector()
        record = self._record(NAMES.agent_events, event["run_id"], orjson.dumps(event))
        self.router.process(record, self.now, out)
        self._commit(self.router, out, self.router_log)
        assert [d.reason.value for d in out.dead_letters] == (["foreign_tenant"] if foreign
                                                               else [])
        registrations = [o for o in out.outputs if o.record_type == "registration"]
        registered = Collector()
        for r in registrations:
            self.validator.process(
                self._record(NAMES.pause_registrations, (r.key or b"").decode(),
                             r.value or b"", r.headers), self.now, registered)
        self._commit(self.validator, registered, self.validator_log)
        assert self._verdicts(registered) == [] and registered.dead_letters == []
        return [o for o in out.outputs if o.record_type == "ticket"]

    @staticmethod
    def _verdicts(out: Collector) -> list[OutputRecord]:
        """Resumes and rejections (not the review console's records of the tickets)."""
        return [o for o in out.outputs if o.topic in (NAMES.resumes, NAMES.resume_rejections)]

    @staticmethod
    def _commit(processor: Any, out: Collector, log: dict[bytes, bytes | None]) -> None:
        write_changes(processor, out)
        log.update(out.changelog)

    # -- the rules -----------------------------------------------------------------

    @rule(run_id=run_ids, tenant=tenants, interrupt_id=interrupt_ids, token=tokens,
          ts=offsets, lifetime=lifetimes)
    def pause(self, run_id: str, tenant: str | None, interrupt_id: str, token: str,
              ts: float, lifetime: float) -> None:
        """A kernel pauses (or re-sends a pause): a ticket unless the run's is remembered."""
        timestamp = self.now + ts
        pending = interrupt("ask_user", interrupt_id=interrupt_id, run_id=run_id,
                            token=token, expires_at=timestamp + lifetime)
        event = raw("ask_user", 0, run_id, interrupt=pending, timestamp=timestamp,
                    scope={"tenant": tenant, "principal": None})
        run = self.runs.get(run_id)
        foreign = run is not None and run.owner != tenant
        tickets = self._route(event, foreign)
        if foreign:
            assert tickets == [], "another tenant's pause made a ticket"
            return
        run = self._seen(run_id, tenant)
        key = (tenant, interrupt_id)
        if key in run.routed:
            assert tickets == [], "a remembered pause was routed again"
            return
        expires = min(timestamp + lifetime, min(timestamp, self.now) + ROUTER_LIFETIME)
        [ticket] = tickets
        body = orjson.loads(ticket.value or b"")
        assert body["expires_at"] == expires
        queue = "expired" if expires <= self.now else "default"
        assert ticket.topic == NAMES.human_queue(queue)
        run.routed.add(key)
        if run.closed_at is None:
            kept = min(max(timestamp + lifetime, self.now), self.now + 24 * IDLE)
            run.forget_at = max(run.forget_at, max(expires, self.now) + GRACE,
                                kept + 2 * GRACE)
        if key not in self.tickets:
            self.tickets[key] = TicketModel(
                run_id, token, min(expires, self.now + VALIDATOR_LIFETIME), self.now)

    def _seen(self, run_id: str, tenant: str | None) -> RunModel:
        """An event of the run's owner (the first one's tenant): the run remembered at
        least an idle timeout plus the grace after it, while open."""
        run = self.runs.setdefault(run_id, RunModel(tenant))
        if run.closed_at is None and run.forget_at < self.now + IDLE + GRACE:
            run.forget_at = self.now + IDLE + IDLE / 8 + GRACE
        return run

    @rule(run_id=run_ids, tenant=tenants)
    def close(self, run_id: str, tenant: str | None) -> None:
        """The run ends: the router remembers it for the grace from now on (another
        tenant's end closes nothing)."""
        event = raw("done", 1, run_id, timestamp=self.now,
                    scope={"tenant": tenant, "principal": None})
        run = self.runs.get(run_id)
        foreign = run is not None and run.owner != tenant
        assert self._route(event, foreign) == []
        if foreign:
            return
        run = self._seen(run_id, tenant)
        if run.closed_at is None:
            run.closed_at = self.now

    @rule(interrupt_id=interrupt_ids, token=tokens,
          named=st.sampled_from(["no", None, "acme", "globex"]))
    def answer(self, interrupt_id: str, token: str, named: str | None) -> None:
        request: dict[str, Any] = {"ticket_id": interrupt_id, "token": token,
                                   "answer": "yes", "responder": "r"}
        if named != "no":
            request["tenant"] = named
        out = Collector()
        self.validator.process(
            self._record(NAMES.pause_registrations, interrupt_id, orjson.dumps(request),
                         (("symfonic-record-type", b"answer"),)), self.now, out)
        self._commit(self.validator, out, self.validator_log)
        [verdict] = self._verdicts(out)
        got = (orjson.loads(verdict.value or b"").get("reason", "accepted"),
               verdict.key if verdict.topic == NAMES.resumes else None)
        assert got == self._verdict(interrupt_id, token, named), request

    def _verdict(self, interrupt_id: str, token: str,
                 named: str | None) -> tuple[str, bytes | None]:
        named_ones = [t for (tenant, i), t in self.tickets.items()
                      if i == interrupt_id and (named == "no" or tenant == named)]
        if not named_ones:
            return "unknown_ticket", None
        matching = [t for t in named_ones if t.token == token]
        if len(matching) != 1:
            return "bad_token", None
        [ticket] = matching
        if ticket.expires_at <= self.now:
            return "expired", None
        if ticket.answered_at is not None:
            return "already_answered", None
        ticket.answered_at = self.now
        return "accepted", ticket.run_id.encode()

    @rule(step=steps)
    def tick(self, step: float) -> None:
        """Time passes and both punctuate: what is due is forgotten."""
        self.now += step
        for processor, log in ((self.router, self.router_log),
                               (self.validator, self.validator_log)):
            out = Collector()
            processor.punctuate(self.now, out)
            self._commit(processor, out, log)
        self.runs = {r: m for r, m in self.runs.items() if m.deadline() > self.now}
        self.tickets = {k: t for k, t in self.tickets.items() if t.deadline() > self.now}

    @rule(run_id=run_ids, tenant=tenants, interrupt_id=interrupt_ids, token=tokens,
          ts=offsets, lifetime=lifetimes, step=steps)
    def aborted(self, run_id: str, tenant: str | None, interrupt_id: str, token: str,
                ts: float, lifetime: float, step: float) -> None:
        """A pause, its registration, an answer to it and a later punctuation, and every
        transaction of them aborts: both processors roll back, and nothing of it happened
        (the model does not move; the rules after it check the outputs against it)."""
        timestamp = self.now + ts
        pending = interrupt("ask_user", interrupt_id=interrupt_id, run_id=run_id,
                            token=token, expires_at=timestamp + lifetime)
        event = raw("ask_user", 0, run_id, interrupt=pending, timestamp=timestamp,
                    scope={"tenant": tenant, "principal": None})
        routed = Collector()
        self.router.process(self._record(NAMES.agent_events, run_id, orjson.dumps(event)),
                            self.now, routed)
        _prepare(self.router, routed)  # (taken by a transaction, then aborted)
        validated = Collector()
        for r in [o for o in routed.outputs if o.record_type == "registration"]:
            self.validator.process(self._record(NAMES.pause_registrations,
                                                (r.key or b"").decode(), r.value or b"",
                                                r.headers), self.now, validated)
        request = {"ticket_id": interrupt_id, "token": token, "answer": "yes",
                   "responder": "r"}
        self.validator.process(
            self._record(NAMES.pause_registrations, interrupt_id, orjson.dumps(request),
                         (("symfonic-record-type", b"answer"),)), self.now, validated)
        for processor in (self.router, self.validator):
            processor.punctuate(self.now + step, Collector())
        for processor, log, fresh in ((self.router, self.router_log, self._router),
                                      (self.validator, self.validator_log, self._validator)):
            processor.stores[0].partition.abort()
            processor.restored()
            rebuilt = fresh(False)
            restore_from(rebuilt, dict(log))
            assert store_contents(processor) == store_contents(rebuilt)

    @precondition(lambda self: self.runs or self.tickets)
    @rule()
    def restart(self) -> None:
        """Both start again from their changelogs (a crash after the last commit)."""
        self.router = self._router()
        restore_from(self.router, dict(self.router_log))
        self.validator = self._validator()
        restore_from(self.validator, dict(self.validator_log))

    @invariant()
    def remembered(self) -> None:
        assert self.router.active_runs == len(self.runs)
        assert self.validator.active_runs == len(self.tickets)


def _tracked(processor: Any) -> Any:
    """Its stores in one partition, as an engine task's are (state/store.py)."""
    StorePartition(processor.stores)
    return processor


def _prepare(processor: Any, out: Collector) -> None:
    """Commit step 2 only: its state taken into a transaction (which then aborts)."""
    processor.stores[0].partition.prepare(out.changelog)


PauseMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                          deadline=None)
TestPauseMachine = PauseMachine.TestCase
