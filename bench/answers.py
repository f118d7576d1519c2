"""``python -m bench answers [--case NAME ...] [--list]``: what one hostile answer costs the
resume validator (issue 33, item 1; docs/pauses.md, "What an answer may cost").

Each case (:data:`CASES`) is a ticket whose ``payload.response_schema`` an attacker chose
and the most expensive answer to it the construction gives, as big as the validator takes
(``SYMFONIC_MAX_ANSWER_BYTES``) unless it says otherwise, both through
``ResumeValidator.process`` as the intake hands them over. Each runs twice in a fresh
interpreter: for CPU (``time.thread_time``) and peak RSS growth, and under tracemalloc for
Python's peak allocations (slower: a check stopped by its CPU budget stops earlier there).
"""

from __future__ import annotations

import argparse
import gc
import resource
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from bench.harness import fresh_interpreter, table
from symfonic_stream.config import Settings
from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.models.headers import ANSWER_MARK, RECORD_TYPE_HEADER, TICKET_MARK
from symfonic_stream.models.names import TopicNames
from symfonic_stream.processors.pauses.validator import ResumeValidator

NAMES = TopicNames("bench")
NOW = 1_000.0
TICKET_ID = "t-1"
TOKEN = "tok-1"
#: The answer limit the cases fill (the setting's default).
LIMIT = Settings.model_fields["max_answer_bytes"].default if (
    "max_answer_bytes" in Settings.model_fields) else 65_536


@dataclass(frozen=True)
class Case:
    """A schema and the answer built to cost the most against it."""

    schema: Any
    answer: Callable[[], Any]
    construction: str


def _request(answer: Any) -> bytes:
    return orjson.dumps({"ticket_id": TICKET_ID, "token": TOKEN, "answer": answer,
                         "responder": "r"})


def _fill(item: Callable[[int], Any], wrap: Callable[[list[Any]], Any] = lambda items: items,
          size: int = LIMIT) -> Any:
    """As many ``item(n)`` as fit a request of ``size`` bytes, wrapped by ``wrap``."""
    per = len(orjson.dumps([item(1), item(2)])) - len(orjson.dumps([item(1)]))
    count = max(1, (size - len(_request(wrap([])))) // per)
    while len(_request(wrap([item(n) for n in range(count)]))) > size:
        count -= 1
    return wrap([item(n) for n in range(count)])


def _string(size: int = LIMIT, char: str = "a") -> str:
    return char * (size - len(_request("")))


def _nested(levels: int, leaf: Any) -> Any:
    for _ in range(levels):
        leaf = [leaf]
    return leaf


def _ref_dag(levels: int, key: str, leaf: Any) -> dict[str, Any]:
    """2**levels paths through ``levels`` definitions of two $refs each, in ~50 bytes a level."""
    defs: dict[str, Any] = {"l0": leaf}
    for level in range(1, levels + 1):
        below = {"$ref": f"#/$defs/l{level - 1}"}
        defs[f"l{level}"] = {key: [below, below]}
    return {"$defs": defs, "$ref": f"#/$defs/l{levels}"}


_ENUM = list(range(1_000))

_ORDINARY_KINDS: tuple[tuple[dict[str, Any], Any], ...] = (
    ({"type": "string", "maxLength": 100, "pattern": "^[a-z ]*$"}, "some text"),
    ({"type": "integer", "minimum": 0}, 42),
    ({"enum": ["red", "green", "blue", "cyan"]}, "cyan"),
    ({"type": "object", "required": ["ok"],
      "properties": {"ok": {"type": "boolean"}, "xs": {"items": {"type": "number"}}}},
     {"ok": True, "xs": [1.5, 2]}),
)


def _ordinary_schema() -> dict[str, Any]:
    """A large schema of ordinary keywords: 200 properties, and rows of objects."""
    properties = {f"p{n}": _ORDINARY_KINDS[n % 4][0] for n in range(200)}
    properties["rows"] = {"type": "array", "items": {
        "type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}}
    return {"type": "object", "properties": properties, "additionalProperties": False}


def _ordinary_answer() -> dict[str, Any]:
    """An answer that fits :func:`_ordinary_schema`, its 1,000 rows included."""
    answer = {f"p{n}": _ORDINARY_KINDS[n % 4][1] for n in range(200)}
    answer["rows"] = [{"id": n, "label": f"row {n}"} for n in range(1000)]
    return answer


CASES: dict[str, Case] = {
    "issue-anyOf-891-false-1MB": Case(
        {"anyOf": [False] * 891}, lambda: _fill(lambda n: 0, size=1_040_060),
        "issue 33's reproducer: 891 false branches, each an error rendering the answer; a "
        "1,040,060-byte request (an array of 0s)"),
    "anyOf-891-false-at-limit": Case(
        {"anyOf": [False] * 891}, lambda: _fill(lambda n: "x" * 20),
        "the same schema, an array of strings as big as the limit takes"),
    "anyOf-64-false-at-limit": Case(
        {"anyOf": [False] * 64}, lambda: _fill(lambda n: 0),
        "as many false branches as registration keeps, an array of 0s"),
    "ref-dag-anyOf-2^24": Case(
        _ref_dag(24, "anyOf", {"type": "integer"}), lambda: "not an integer",
        "24 definitions of two $refs each under anyOf: 2**24 failing paths"),
    "ref-dag-allOf-unevaluated-2^24": Case(
        {**_ref_dag(24, "allOf", {"properties": {"a": {}}}), "unevaluatedProperties": False},
        lambda: _fill(lambda n: (f"k{n}", 0), dict),
        "unevaluatedProperties over 2**24 allOf paths (walked without a keyword call), an "
        "object of as many keys as fit"),
    "recursive-items-2^depth": Case(
        {"type": "array", "anyOf": [{"items": {"$ref": "#"}}, {"items": {"$ref": "#"}}]},
        lambda: _nested(60, "x"),
        "two branches descending by $ref at every level: 2**60 paths to a failing leaf"),
    "ref-loop": Case(
        {"$defs": {"loop": {"$ref": "#/$defs/loop"}}, "$ref": "#/$defs/loop"}, lambda: 1,
        "a $ref to itself"),
    "uniqueItems-objects-at-limit": Case(
        {"uniqueItems": True}, lambda: _fill(lambda n: {"a": n}),
        "distinct objects (jsonschema compares every pair of unsortable items)"),
    "enum-1000-items-at-limit": Case(
        {"items": {"enum": _ENUM}}, lambda: _fill(lambda n: _ENUM[-1]),
        "every item the enum's last entry: items x entries comparisons"),
    "patterns-64-keys-at-limit": Case(
        {"patternProperties": {f"^p{n}-[a-z]+$": {} for n in range(64)},
         "additionalProperties": False},
        lambda: _fill(lambda n: (f"k{n}", 0), dict),
        "64 patterns (the cap) tried on every key of an object as big as the limit takes"),
    "pattern-big-program-at-limit": Case(
        {"items": {"pattern": "(x+x+)+y" + "|a{100}b" * 20}},
        lambda: _fill(lambda n: "c" * 150 + "a" * 100 + "b"),
        "a large RE2 program searched through every string of an array, each matching at "
        "its end"),
    "pattern-one-long-string": Case(
        {"pattern": "a{500}b"}, lambda: _string(),
        "RE2 out of DFA memory over one string as long as the limit takes"),
    "oneOf-64-deep-at-limit": Case(
        {"oneOf": [{"items": {"items": {"type": "integer", "minimum": n}}} for n in range(64)]},
        lambda: _fill(lambda n: [0, 0, 0]),
        "64 branches (the cap), each walking the whole answer"),
    "widest-schema-registration": Case(
        {"allOf": [{"anyOf": [{"type": "integer", "minimum": n, "maximum": 1000 + n}
                              for n in range(64)]} for _ in range(21)]},
        lambda: _fill(lambda n: -1),
        "a schema of ~63 KiB, 21 allOf branches of 64 anyOf branches (the caps), checked "
        "against its metaschema; an answer of -1s, each failing all 64"),
    "format-email-at-limit": Case(
        {"format": "email"}, lambda: _string(),
        "a format (an annotation: never checked)"),
    "large-ordinary-schema": Case(
        _ordinary_schema(), _ordinary_answer,
        "no attack: 200 properties of four ordinary kinds and an array of 1,000 objects, an "
        "answer that fits it (it must fit the budget with room; tests/unit/"
        "test_answer_schema.py holds its verdicts)"),
}


def _record(offset: int, key: str, value: bytes, mark: bytes) -> InputRecord:
    return InputRecord(NAMES.pause_registrations, 0, offset, key.encode(), value,
                       ((RECORD_TYPE_HEADER, mark),))


def _ticket(schema: Any) -> bytes:
    return orjson.dumps({
        "ticket_id": TICKET_ID, "queue": "q", "kind": "interrupt", "name": "approve",
        "questions": None, "payload": {"response_schema": schema}, "token": TOKEN,
        "run_id": "run-1", "root_run_id": None, "session_id": None, "thread_id": None,
        "tool_call_id": None, "tenant": None, "principal": None, "expires_at": NOW + 3600,
        "resumable": True, "routed_at": NOW, "source": "bench/0/0"})


def _validator() -> ResumeValidator:
    settings = Settings()
    return ResumeValidator(NAMES, grace_s=600.0, decode=settings.decode_limits())


def _measured(step: Callable[[], None], traced: bool) -> tuple[float, float]:
    """(CPU seconds, peak MiB) of ``step``: RSS growth, or tracemalloc's peak when traced."""
    gc.collect()
    if traced:
        tracemalloc.start()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.thread_time()
    step()
    cpu = time.thread_time() - start
    if traced:
        peak = (tracemalloc.get_traced_memory()[1] - base) / 2**20
        tracemalloc.stop()
    else:
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    return cpu, peak


def run_case(name: str, traced: str) -> dict[str, Any]:
    """(In a fresh interpreter.) One case: registration and answer, measured (``traced``:
    "1" under tracemalloc)."""
    case = CASES[name]
    ticket, request = _ticket(case.schema), _request(case.answer())
    validator, out = _validator(), Collector()
    register = _measured(lambda: validator.process(
        _record(1, TICKET_ID, ticket, TICKET_MARK), NOW, out), traced == "1")
    answer = _measured(lambda: validator.process(
        _record(2, TICKET_ID, request, ANSWER_MARK), NOW, out), traced == "1")
    verdicts = [orjson.loads(o.value or b"") for o in out.outputs]
    dead = [f"dead letter {d.reason}: {d.detail}" for d in out.dead_letters]
    verdict = (f"{verdicts[-1].get('reason', 'accepted')}: {verdicts[-1].get('detail', '')}"
               if verdicts else "; ".join(map(str, dead)) or "none")
    return {"case": name, "request_bytes": len(request), "schema_bytes": len(orjson.dumps(
        case.schema)), "register": register, "answer": answer, "verdict": verdict[:160]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench answers",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="repeatable")
    parser.add_argument("--list", action="store_true", help="the constructions, then exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, case in CASES.items():
            print(f"{name}: {case.construction}")
        return 0
    lines = [["case", "request B", "reg s", "reg MiB", "answer s", "RSS MiB", "traced MiB",
              "verdict"]]
    for name in args.case or CASES:
        plain, traced = (fresh_interpreter(run_case, name, mode) for mode in ("0", "1"))
        lines.append([name, f"{plain['request_bytes']:,}", f"{plain['register'][0]:.3f}",
                      f"{max(plain['register'][1], traced['register'][1]):.1f}",
                      f"{plain['answer'][0]:.3f}", f"{plain['answer'][1]:.1f}",
                      f"{traced['answer'][1]:.1f}", plain["verdict"]])
    print(table(lines))
    return 0

