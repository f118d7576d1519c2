"""Whether a human's answer fits its ticket's ``payload.response_schema``, safely.

Whoever writes a ticket writes its schema, and the validator applies it on its event
loop: so no ``$ref`` may leave the schema (no file, no network), its size, nesting,
branches and arrays are capped when the ticket is registered, its patterns run on RE2
(linear time), and each check runs under a budget of CPU time (``time.thread_time``),
looked at as it proceeds, with the answer in hand as :func:`.schema_keywords.quiet`
copies, so that no message costs more than a few characters of it. What a refusal says
never shows the answer: the keyword that failed, the schema's value for it and where in
the answer (keys cut short).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urldefrag, urljoin

import jsonschema_specifications  # type: ignore[import-untyped]
import orjson
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import FormatChecker, ValidationError, validators
from jsonschema.protocols import Validator

from symfonic_stream.processors.pauses.schema_keywords import (
    BUDGET,
    KEYWORDS,
    MAX_REGEX_WORK,
    OverBudget,
    Refused,
    budgeted,
    quiet,
    regex,
)

#: The largest schema applied, as orjson encodes it.
MAX_SCHEMA_BYTES = 64 * 1024
#: The deepest nesting of objects and arrays in a schema (its root object is level 1).
MAX_SCHEMA_DEPTH = 32
#: Distinct patterns a schema may hold (each compiles in 3 ms at most: MAX_PATTERN_MEMORY).
MAX_SCHEMA_PATTERNS = 64
#: Subschemas in one array: the branches of an ``anyOf``, ``oneOf`` or ``allOf`` (each may
#: be tried on every value of the answer it applies to), and the items of ``prefixItems``
#: or an array-form ``items`` (each checked against the metaschema at registration: 1,024
#: of them took 0.43 s of the 0.5 s budget, so a schema at the cap could be refused or not).
MAX_SCHEMA_BRANCHES = 64
#: Items of any other array in a schema (``enum``, ``required``, ...): an ``enum`` is
#: compared with every value it applies to.
MAX_SCHEMA_ARRAY = 1024
#: CPU seconds (this thread's) that checking a schema against its metaschema may take,
#: once per ticket, at registration. A 64 KiB schema of 64-branch allOfs takes ~0.1 s.
MAX_SCHEMA_CPU_S = 0.5
#: CPU seconds that checking one answer may take. An ordinary check takes well under a
#: millisecond; a 200-property schema and a 1,000-item answer ~40 ms; bench/answers.py has
#: the worst answers measured against hostile schemas. An answer is checked at most
#: MAX_INVALID_ANSWERS times a ticket (validator.py), so what answers cost is bounded too.
MAX_ANSWER_CPU_S = 0.2
#: Profiler events between two looks at the clock (one costs ~0.6 µs; an event ~0.3 µs).
CLOCK_EVERY = 256
#: Frames the check may nest (a $ref looping on itself), counted from its start so that
#: the caller's depth changes nothing (an answer nested 64 deep takes ~400).
MAX_VALIDATION_FRAMES = 500
#: The most of a schema's value for the failed keyword, or of the path, a refusal shows.
MAX_SHOWN_CHARS = 200
#: The most of one key of the path a refusal shows.
MAX_KEY_CHARS = 32

_SCHEMA = "the ticket's response_schema"
TOO_LONG = f"{_SCHEMA} takes too long to apply"
OUTSIDE = f"{_SCHEMA} cannot be applied: it refers outside itself (a $ref may only name it)"
NOWHERE = f"{_SCHEMA} cannot be applied: a $ref in it resolves nowhere"
_BUNDLED: referencing.Registry[Any] = jsonschema_specifications.REGISTRY
#: The keywords whose arrays hold subschemas (MAX_SCHEMA_BRANCHES).
_BRANCHING = frozenset({"anyOf", "oneOf", "allOf", "prefixItems", "items"})


def _retrieve(uri: str) -> referencing.Resource[Any]:
    raise Refused(OUTSIDE)  # whatever the schema does not hold: nothing is read


_NOTHING_ELSE: referencing.Registry[Any] = referencing.Registry(
    retrieve=_retrieve,  # type: ignore[call-arg]  # an attrs alias its stubs miss
)


#: The metaschema check's one format, ``regex``, on RE2 (jsonschema's compiles with re);
#: a pattern RE2 cannot compile refuses the schema.
_FORMATS = FormatChecker(())
_FORMATS.checks("regex")(lambda instance: not isinstance(instance, str) or bool(regex(instance)))


@dataclass(frozen=True, slots=True)
class _Dialect:
    applies: type[Validator]  # the draft, its patterns on RE2
    meta: Validator  # the draft's metaschema, as check_schema applies it
    id_of: Callable[[Any], str | None]  # how referencing reads an $id in the draft


def _bounded(draft: type[Validator]) -> type[Validator]:
    """``draft`` with KEYWORDS in place of its own, every keyword within the budget."""
    keywords = {**draft.VALIDATORS, **KEYWORDS}
    return cast(type[Validator], validators.extend(  # type: ignore[no-untyped-call]
        draft, {name: budgeted(keyword) for name, keyword in keywords.items()}))


def _unnamed(contents: Any) -> Any:
    """A schema without its ``$schema``: jsonschema's ``evolve`` swaps in the stock class
    of the draft a ``$schema`` names, dropping ours (its keywords, its budget)."""
    if isinstance(contents, dict):
        return {key: value for key, value in contents.items() if key != "$schema"}
    return contents


#: The bundled metaschemas, each unnamed, so that checking a schema against one stays in
#: our class wherever its $refs and $dynamicRefs lead (crawled: their anchors must win
#: over the bundled ones' when jsonschema combines the two registries).
_METASCHEMAS: referencing.Registry[Any] = referencing.Registry().with_resources(
    (uri, referencing.jsonschema.specification_with(contents["$schema"]).create_resource(
        _unnamed(contents)))
    for uri, contents in ((uri, _BUNDLED.contents(uri)) for uri in _BUNDLED)).crawl()


def _dialect(draft: type[Validator]) -> _Dialect:
    meta = _bounded(validators.validator_for(draft.META_SCHEMA, default=draft))
    spec = referencing.jsonschema.specification_with(draft.META_SCHEMA["$schema"])
    return _Dialect(_bounded(draft), meta(_unnamed(draft.META_SCHEMA), registry=_METASCHEMAS,
                                          format_checker=_FORMATS), spec.id_of)


#: Draft 3 is not among them: its ``type`` may hold schemas, whose errors it keeps, all.
_DIALECTS: dict[type[Validator], _Dialect] = {draft: _dialect(draft) for draft in (
    validators.Draft4Validator, validators.Draft6Validator,
    validators.Draft7Validator, validators.Draft201909Validator,
    validators.Draft202012Validator)}
_UNKNOWN = cast(type[Validator], validators.create(meta_schema={}))
_LATEST = validators.Draft202012Validator.META_SCHEMA["$id"]


def _dialect_of(schema: dict[str, Any]) -> _Dialect:
    """The draft that ``$schema`` names, 2020-12 without one. Any other ``$schema`` is
    refused, never retrieved: what it means would be a guess."""
    declared = schema.get("$schema", _LATEST)
    found = validators.validator_for({"$schema": declared}, _UNKNOWN) if isinstance(
        declared, str) else _UNKNOWN
    dialect = _DIALECTS.get(found)
    if dialect is None:
        raise Refused(f"{_SCHEMA} is not supported: its $schema is not draft 4, 6, 7, "
                      "2019-09 or 2020-12")
    return dialect


def _check_shape(schema: dict[str, Any], dialect: _Dialect) -> None:
    """Refuses a schema too large, too deep, too wide, and one a $ref of which could leave
    it: each must name the schema or one of its own ``$id``s (resolved as referencing does;
    none a bundled metaschema, which jsonschema would otherwise serve)."""
    try:
        size = len(orjson.dumps(schema))
    except TypeError:  # not JSON, or deeper than orjson goes (refused below as too deep)
        size = -1
    if size > MAX_SCHEMA_BYTES:
        raise Refused(f"{_SCHEMA} is too large (over {MAX_SCHEMA_BYTES} bytes)")
    bases, targets, keywords, patterns = {""}, list[str](), set[str](), set[str]()
    stack: list[tuple[Any, str, int]] = [(schema, "", 1)]
    while stack:
        node, base, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise Refused(f"{_SCHEMA} is too deep (over {MAX_SCHEMA_DEPTH} levels of nesting)")
        if isinstance(node, dict):
            if node is not schema and isinstance(node.get("$schema"), str):
                raise Refused(f"{_SCHEMA} is not supported: a $schema inside it")
            if (own := _id_of(node, dialect)) is not None:
                base = _join(base, own)
                bases.add(base)
            targets += [base if ref.startswith("#") else urldefrag(_join(base, ref)).url
                        for ref in map(node.get, ("$ref", "$dynamicRef", "$recursiveRef"))
                        if isinstance(ref, str)]
            keywords.update(key for key in ("unevaluatedProperties", "patternProperties")
                            if key in node)
            patterns.update(_patterns_in(node))
            _check_widths(node)
            node = node.values()
        stack.extend((child, base, depth + 1) for child in node if isinstance(child, dict | list))
    if any(target not in bases for target in targets) or any(base in _BUNDLED for base in bases):
        raise Refused(OUTSIDE)
    if len(patterns) > MAX_SCHEMA_PATTERNS:
        raise Refused(f"{_SCHEMA} is too large (over {MAX_SCHEMA_PATTERNS} patterns)")
    if len(keywords) == 2:  # jsonschema's unevaluatedProperties would match them with re
        raise Refused(f"{_SCHEMA} is not supported: unevaluatedProperties with "
                      "patternProperties")
    if size < 0:
        raise Refused(f"{_SCHEMA} is not a valid JSON Schema: it is not JSON")


def _check_widths(node: dict[str, Any]) -> None:
    """Refuses a node with more branches (anyOf, oneOf, allOf) than MAX_SCHEMA_BRANCHES, or
    another array longer than MAX_SCHEMA_ARRAY (an ``enum`` among them). An array nested
    in an ``enum`` or ``const`` value is data, and not capped but by MAX_SCHEMA_BYTES."""
    for key, value in node.items():
        if not isinstance(value, list):
            continue
        most = MAX_SCHEMA_BRANCHES if key in _BRANCHING else MAX_SCHEMA_ARRAY
        if len(value) > most:
            raise Refused(f"{_SCHEMA} is too large (its {str(key)[:40]!r} has over {most} "
                          "items)")


def _patterns_in(node: dict[str, Any]) -> list[str]:
    named, keyed = node.get("pattern"), node.get("patternProperties")
    return ([named] if isinstance(named, str) else []) + (
        [key for key in keyed if isinstance(key, str)] if isinstance(keyed, dict) else [])


def _id_of(node: dict[str, Any], dialect: _Dialect) -> str | None:
    try:  # the draft's own reading (a $ref beside it may void it), whatever its type
        own = dialect.id_of(node)
    except (AttributeError, TypeError):
        return None
    return own.rstrip("#") if isinstance(own, str) else None


def _join(base: str, reference: str) -> str:
    try:
        return urljoin(base, reference)
    except ValueError:  # not a URI: it names nothing in the schema
        raise Refused(OUTSIDE) from None


def _within_budget(run: Callable[[], str | None], cpu_s: float) -> str | None:
    """``run()``, aborted past ``cpu_s`` seconds of this thread's CPU (looked at every
    CLOCK_EVERY profiler events), MAX_VALIDATION_FRAMES frames or MAX_REGEX_WORK (see
    schema_keywords._matches); the caller's profiler (a Python one) is put back. The
    profiler only marks the budget spent: the next keyword raises (budgeted)."""
    clock, depth, events, most_frames = time.thread_time, 0, 0, MAX_VALIDATION_FRAMES
    deadline = clock() + cpu_s
    BUDGET.left, BUDGET.spent = MAX_REGEX_WORK, False

    def watch(frame: object, event: str, arg: object) -> None:
        nonlocal depth, events
        events += 1
        if event == "call":
            depth += 1
            if depth > most_frames:
                BUDGET.spent = True
        elif event == "return":
            depth -= 1
        if events % CLOCK_EVERY == 0 and clock() > deadline:
            BUDGET.spent = True

    previous = _restorable(sys.getprofile())
    sys.setprofile(watch)
    try:
        return run()
    finally:
        sys.setprofile(previous)


def _restorable(profiler: Any) -> Any:
    return profiler if callable(profiler) else None  # a C one (cProfile) cannot be put back


def _check_meta(schema: dict[str, Any], dialect: _Dialect) -> str | None:
    wrong = next(iter(dialect.meta.iter_errors(quiet(schema))), None)
    if wrong is not None:  # (the metaschema's value for its keyword would say little)
        return f"{_SCHEMA} is not a valid JSON Schema: {_described(wrong, 'schema', False)}"
    return None


def _validate(answer: Any, schema: dict[str, Any], dialect: _Dialect) -> str | None:
    # Without its $schema: jsonschema picks a class for each subschema it enters by its
    # $schema, and would apply the draft's own (patterns on re) at a $ref to the root.
    bare = {key: value for key, value in schema.items() if key != "$schema"}
    errors = dialect.applies(bare, registry=_NOTHING_ELSE).iter_errors(quiet(answer))
    error = next(iter(errors), None)  # the first: every other would be made and kept
    return None if error is None else _described(error)


def _described(error: ValidationError, root: str = "answer", valued: bool = True) -> str:
    """Where in the instance (its keys cut short), the keyword that failed and (``valued``)
    the schema's value for it, as JSON: never the instance, whose part in
    ``error.message`` is quiet's constant words anyway."""
    where = "/".join(str(part)[:MAX_KEY_CHARS] for part in error.absolute_path) or root
    if len(where) > MAX_SHOWN_CHARS:
        where = "..." + where[-MAX_SHOWN_CHARS:]
    if error.validator is None:  # the schema false
        return f"{where}: fails the schema false"
    keyword = f"{where}: fails {str(error.validator)[:MAX_KEY_CHARS]!r}"
    if not valued:
        return keyword
    try:
        value = orjson.dumps(error.validator_value).decode()
    except TypeError:  # (paranoid: the schema was JSON when it was registered)
        value = "(its value)"
    if len(value) > MAX_SHOWN_CHARS:
        value = value[:MAX_SHOWN_CHARS] + "..."
    return f"{keyword}: {value}"


def _unresolvable(exc: BaseException | None) -> str:
    while exc is not None and not isinstance(exc, Refused):
        exc = exc.__cause__  # referencing's Unretrievable, from _retrieve's refusal
    return NOWHERE if exc is None else str(exc.args[0])


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` cannot be applied safely (None: it can), checked once per ticket.

    The reason says what kind of problem it has, and never shows a retrieved document or
    a library error.
    """
    return _guarded(lambda: _check(schema), MAX_SCHEMA_CPU_S)


def answer_problem(answer: Any, schema: dict[str, Any] | None) -> str | None:
    """Why ``answer`` does not fit ``schema`` (None when it fits or there is no schema),
    ``schema`` having passed :func:`schema_problem`."""
    if schema is None:
        return None
    return _guarded(lambda: _validate(answer, schema, _dialect_of(schema)), MAX_ANSWER_CPU_S)


def _check(schema: dict[str, Any]) -> str | None:
    dialect = _dialect_of(schema)
    _check_shape(schema, dialect)
    return _check_meta(schema, dialect)


def _guarded(run: Callable[[], str | None], cpu_s: float) -> str | None:
    try:
        return _within_budget(run, cpu_s)
    except Refused as refused:
        return str(refused.args[0])
    except (OverBudget, RecursionError):
        return TOO_LONG
    except referencing.exceptions.Unresolvable as exc:
        return _unresolvable(exc)
    except Exception:  # still the schema's fault (an unknown type, say): not the batch's
        return f"{_SCHEMA} cannot be applied"
