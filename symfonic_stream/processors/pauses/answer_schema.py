"""Whether a human's answer fits its ticket's ``payload.response_schema``, safely.

Whoever writes a ticket writes its schema, and the validator applies it on its event
loop: so no ``$ref`` may leave the schema (no file, no network), its size and nesting are
capped, its patterns run on RE2 (linear time), and the check runs under a budget that
counts work rather than time, so that a replay refuses the same answers.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urldefrag, urljoin

import jsonschema_specifications  # type: ignore[import-untyped]
import orjson
import re2  # type: ignore[import-untyped]
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import FormatChecker, ValidationError, validators
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator

#: The largest schema applied, as orjson encodes it.
MAX_SCHEMA_BYTES = 64 * 1024
#: The deepest nesting of objects and arrays in a schema (its root object is level 1).
MAX_SCHEMA_DEPTH = 32
#: Profiler events (Python and C calls and returns) for checking the schema against its
#: metaschema and the answer against it. Measured (2 cores, CPython 3.11, jsonschema
#: 4.26): an approval schema ~5,100 (4 ms); 200 properties (enums, patterns, nested
#: objects) and a 1,000-item answer array 1.34 M (0.3 s unhooked, 0.8 s counted; 1.1 M
#: of it the metaschema check, ~1,100 a subschema). Stopped here, after 0.75-1.2 s:
#: uniqueItems on 5,000 objects (48 s unhooked), a 2**24 anyOf bomb, 21,000 empty allOf
#: branches (9 s in check_schema). sys.settrace on calls only counts 0.38 M in 0.57 s,
#: but it would displace coverage's tracer and see no C call and no return.
MAX_SCHEMA_STEPS = 2_000_000
#: The same for one answer against a schema already checked (the metaschema check is done
#: once, when the ticket is registered: :func:`schema_problem`): the 200-property schema's
#: 1,000-item answer takes ~0.24 M. An answer is checked at most MAX_INVALID_ANSWERS times
#: a ticket (validator.py), so what answers can cost a ticket is bounded too.
MAX_ANSWER_STEPS = 400_000
#: Frames the check may nest (a $ref looping on itself), counted from its start so that
#: the caller's depth changes nothing (an answer nested 64 deep takes ~400).
MAX_VALIDATION_FRAMES = 500
#: What RE2 may use for one pattern: a bigger program fails to compile, in 3 ms at most
#: (1 MiB: 12 ms; a bounded DFA only makes searches slower, as MAX_REGEX_WORK counts).
MAX_PATTERN_MEMORY = 256 << 10
#: Distinct patterns a schema may hold: compiling them is not counted (see _regex).
MAX_SCHEMA_PATTERNS = 64
#: RE2 instructions times characters that the searches of one check may take. Linear is
#: not fast: RE2 out of DFA memory runs ``a{500}b`` over 100,000 characters (5e7) in
#: ~0.9 s here, so this stops a search after ~0.2 s; ``^[a-z ]*$`` on a 100-character
#: answer costs 400.
MAX_REGEX_WORK = 10_000_000
#: The most of a message about the answer that a rejection shows.
MAX_MESSAGE_CHARS = 512

_SCHEMA = "the ticket's response_schema"
TOO_LONG = f"{_SCHEMA} takes too long to apply"
OUTSIDE = f"{_SCHEMA} cannot be applied: it refers outside itself (a $ref may only name it)"
NOWHERE = f"{_SCHEMA} cannot be applied: a $ref in it resolves nowhere"
_BUNDLED: referencing.Registry[Any] = jsonschema_specifications.REGISTRY


class _Refused(Exception):
    """The schema cannot be applied; ``args[0]`` says why."""


class _OverBudget(BaseException):
    """The budget is spent: a BaseException, that no library's ``except Exception`` eats."""


def _retrieve(uri: str) -> referencing.Resource[Any]:
    raise _Refused(OUTSIDE)  # whatever the schema does not hold: nothing is read


_NOTHING_ELSE: referencing.Registry[Any] = referencing.Registry(
    retrieve=_retrieve,  # type: ignore[call-arg]  # an attrs alias its stubs miss
)
#: What is left of MAX_REGEX_WORK in the check under way (``left``), per thread.
_WORK = threading.local()


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    """RE2's program for ``pattern``, or why it has none."""
    options = re2.Options()
    options.max_mem = MAX_PATTERN_MEMORY
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        why = exc.args[0] if exc.args else "rejected"
        return why.decode("utf-8", "replace") if isinstance(why, bytes) else str(why)


def _regex(pattern: str) -> Any:
    """``pattern`` on RE2. Compiled uncounted, so that a cache hit and a miss cost the same
    steps (MAX_SCHEMA_PATTERNS and MAX_PATTERN_MEMORY bound that time instead)."""
    counter = sys.getprofile()
    sys.setprofile(None)
    try:
        compiled = _compiled(pattern)
    finally:
        sys.setprofile(_restorable(counter))
    if isinstance(compiled, str):
        shown = pattern if len(pattern) <= 60 else pattern[:57] + "..."
        raise _Refused(f"{_SCHEMA}'s pattern {shown!r} is not supported: {compiled}")
    return compiled


def _matches(regex: Any, text: str) -> bool:
    """Whether ``regex`` matches in ``text``, its work taken off the check's budget."""
    _WORK.left -= regex.programsize * (len(text) + 1)
    if _WORK.left < 0:
        raise _OverBudget
    return regex.search(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _matches(_regex(pattern), instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "object"):
        for pattern, subschema in patterns.items():
            regex = _regex(pattern)
            for key, value in instance.items():
                if _matches(regex, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    """jsonschema's, with its patternProperties on RE2 and the extras in answer order."""
    if not validator.is_type(instance, "object"):
        return
    named, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    regexes = [_regex(pattern) for pattern in patterns]
    extras = [k for k in instance if k not in named and not any(_matches(r, k) for r in regexes)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        shown, one = ", ".join(map(repr, sorted(extras))), len(extras) == 1
        if patterns:
            listed = ", ".join(map(repr, sorted(patterns)))
            yield ValidationError(f"{shown} {'does' if one else 'do'} not match any of the "
                                  f"regexes: {listed}")
        else:
            yield ValidationError(f"Additional properties are not allowed ({shown} "
                                  f"{'was' if one else 'were'} unexpected)")


#: The metaschema check's one format, ``regex``, on RE2 (jsonschema's compiles with re);
#: a pattern RE2 cannot compile refuses the schema.
_FORMATS = FormatChecker(())
_FORMATS.checks("regex")(lambda instance: not isinstance(instance, str) or bool(_regex(instance)))
# jsonschema's additionalProperties matches the patternProperties too (with re).
_KEYWORDS = {"pattern": _pattern, "patternProperties": _pattern_properties,
             "additionalProperties": _additional_properties}


@dataclass(frozen=True, slots=True)
class _Dialect:
    applies: type[Validator]  # the draft, its patterns on RE2
    meta: Validator  # the draft's metaschema, as check_schema applies it
    id_of: Callable[[Any], str | None]  # how referencing reads an $id in the draft


def _dialect(draft: type[Validator]) -> _Dialect:
    meta = validators.validator_for(draft.META_SCHEMA, default=draft)
    applies = validators.extend(draft, _KEYWORDS)  # type: ignore[no-untyped-call]
    spec = referencing.jsonschema.specification_with(draft.META_SCHEMA["$schema"])
    return _Dialect(cast(type[Validator], applies),
                    meta(draft.META_SCHEMA, format_checker=_FORMATS), spec.id_of)


_DIALECTS: dict[type[Validator], _Dialect] = {draft: _dialect(draft) for draft in (
    validators.Draft3Validator, validators.Draft4Validator, validators.Draft6Validator,
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
        raise _Refused(f"{_SCHEMA} is not supported: its $schema is not a draft jsonschema "
                       "bundles")
    return dialect


def _check_shape(schema: dict[str, Any], dialect: _Dialect) -> None:
    """Refuses a schema too large or too deep, and one a $ref of which could leave it:
    each must name the schema or one of its own ``$id``s (resolved as referencing does;
    none a bundled metaschema, which jsonschema would otherwise serve)."""
    try:
        size = len(orjson.dumps(schema))
    except TypeError:  # not JSON, or deeper than orjson goes (refused below as too deep)
        size = -1
    if size > MAX_SCHEMA_BYTES:
        raise _Refused(f"{_SCHEMA} is too large (over {MAX_SCHEMA_BYTES} bytes)")
    bases, targets, keywords, patterns = {""}, list[str](), set[str](), set[str]()
    stack: list[tuple[Any, str, int]] = [(schema, "", 1)]
    while stack:
        node, base, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise _Refused(f"{_SCHEMA} is too deep (over {MAX_SCHEMA_DEPTH} levels of nesting)")
        if isinstance(node, dict):
            if node is not schema and isinstance(node.get("$schema"), str):
                raise _Refused(f"{_SCHEMA} is not supported: a $schema inside it")
            if (own := _id_of(node, dialect)) is not None:
                base = _join(base, own)
                bases.add(base)
            targets += [base if ref.startswith("#") else urldefrag(_join(base, ref)).url
                        for ref in map(node.get, ("$ref", "$dynamicRef", "$recursiveRef"))
                        if isinstance(ref, str)]
            keywords.update(key for key in ("unevaluatedProperties", "patternProperties")
                            if key in node)
            patterns.update(_patterns_in(node))
            node = node.values()
        stack.extend((child, base, depth + 1) for child in node if isinstance(child, dict | list))
    if any(target not in bases for target in targets) or any(base in _BUNDLED for base in bases):
        raise _Refused(OUTSIDE)
    if len(patterns) > MAX_SCHEMA_PATTERNS:
        raise _Refused(f"{_SCHEMA} is too large (over {MAX_SCHEMA_PATTERNS} patterns)")
    if len(keywords) == 2:  # jsonschema's unevaluatedProperties would match them with re
        raise _Refused(f"{_SCHEMA} is not supported: unevaluatedProperties with "
                       "patternProperties")
    if size < 0:
        raise _Refused(f"{_SCHEMA} is not a valid JSON Schema: it is not JSON")


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
        raise _Refused(OUTSIDE) from None


def _within_budget(run: Callable[[], str | None], most_steps: int) -> str | None:
    """``run()``, aborted past ``most_steps`` events, MAX_VALIDATION_FRAMES frames or
    MAX_REGEX_WORK (see _matches); the caller's profiler (a Python one) is put back."""
    steps, depth, most_frames = 0, 0, MAX_VALIDATION_FRAMES
    _WORK.left = MAX_REGEX_WORK

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal steps, depth
        steps += 1
        if event == "call":
            depth += 1
            if depth > most_frames:
                raise _OverBudget
        elif event == "return":
            depth -= 1
        if steps > most_steps:
            raise _OverBudget  # CPython unhooks a profiler that raised

    previous = _restorable(sys.getprofile())
    sys.setprofile(count)
    try:
        return run()
    finally:
        sys.setprofile(previous)


def _restorable(profiler: Any) -> Any:
    return profiler if callable(profiler) else None  # a C one (cProfile) cannot be put back


def _check_meta(schema: dict[str, Any], dialect: _Dialect) -> str | None:
    wrong = next(iter(dialect.meta.iter_errors(schema)), None)
    if wrong is not None:
        return f"{_SCHEMA} is not a valid JSON Schema: {wrong.message[:MAX_MESSAGE_CHARS]}"
    return None


def _validate(answer: Any, schema: dict[str, Any], dialect: _Dialect) -> str | None:
    # Without its $schema: jsonschema picks a class for each subschema it enters by its
    # $schema, and would apply the draft's own (patterns on re) at a $ref to the root.
    bare = {key: value for key, value in schema.items() if key != "$schema"}
    error = best_match(dialect.applies(bare, registry=_NOTHING_ELSE).iter_errors(answer))
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path) or "answer"
    return f"{where}: {error.message[:MAX_MESSAGE_CHARS]}"


def _unresolvable(exc: BaseException | None) -> str:
    while exc is not None and not isinstance(exc, _Refused):
        exc = exc.__cause__  # referencing's Unretrievable, from _retrieve's refusal
    return NOWHERE if exc is None else str(exc.args[0])


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` cannot be applied safely (None: it can), checked once per ticket.

    The reason says what kind of problem it has, and never shows a retrieved document or
    a library error.
    """
    return _guarded(lambda: _check(schema), MAX_SCHEMA_STEPS)


def answer_problem(answer: Any, schema: dict[str, Any] | None) -> str | None:
    """Why ``answer`` does not fit ``schema`` (None when it fits or there is no schema),
    ``schema`` having passed :func:`schema_problem`."""
    if schema is None:
        return None
    return _guarded(lambda: _validate(answer, schema, _dialect_of(schema)), MAX_ANSWER_STEPS)


def _check(schema: dict[str, Any]) -> str | None:
    dialect = _dialect_of(schema)
    _check_shape(schema, dialect)
    return _check_meta(schema, dialect)


def _guarded(run: Callable[[], str | None], most_steps: int) -> str | None:
    try:
        return _within_budget(run, most_steps)
    except _Refused as refused:
        return str(refused.args[0])
    except (_OverBudget, RecursionError):
        return TOO_LONG
    except referencing.exceptions.Unresolvable as exc:
        return _unresolvable(exc)
    except Exception:  # still the schema's fault (an unknown type, say): not the batch's
        return f"{_SCHEMA} cannot be applied"
