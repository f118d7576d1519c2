"""The keywords :mod:`.answer_schema` applies in place of jsonschema's, and the answer as
they see it.

jsonschema's own keywords are correct but not bounded for a hostile schema and answer:
``anyOf`` and ``oneOf`` keep every error of every branch (each rendering the answer with
``repr``: issue 33's 891 ``false`` branches and a 1 MB answer took 27 s and 1.37 GB),
``uniqueItems`` compares every pair of items it cannot sort, and ``pattern`` runs on
Python's backtracking ``re``. These decide the same, with bounded work: a branch is tried
until its first error, unique items are hashed, patterns run on RE2 with their work
counted. And the answer is handed to jsonschema as :func:`quiet` copies whose ``repr`` is a
few constant characters, so that no message it formats costs more than the schema's part.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from typing import Any

import re2  # type: ignore[import-untyped]
from jsonschema import ValidationError

_SCHEMA = "the ticket's response_schema"
#: What RE2 may use for one pattern: a bigger program fails to compile, in 3 ms at most
#: (1 MiB: 12 ms; a bounded DFA only makes searches slower, as MAX_REGEX_WORK counts).
MAX_PATTERN_MEMORY = 256 << 10
#: RE2 instructions times characters that the searches of one check may take, counted
#: before each search (one search is one C call: no clock can stop it). Linear is not
#: fast: RE2 out of DFA memory runs ``a{500}b`` over 100,000 characters (5e7) in ~0.9 s
#: here, so one check's searches stop after ~0.1 s; ``^[a-z ]*$`` on a 100-character
#: answer costs 400.
MAX_REGEX_WORK = 5_000_000
#: The check under way, per thread: what is left of MAX_REGEX_WORK (``left``), and whether
#: its budget is spent (``spent``: set by answer_schema's profiler, raised on by keywords).
BUDGET = threading.local()


class Refused(Exception):
    """The schema cannot be applied; ``args[0]`` says why."""


class OverBudget(BaseException):
    """The budget is spent: a BaseException, that no library's ``except Exception`` eats."""


def budgeted(keyword: Any) -> Any:
    """``keyword``, raising :class:`OverBudget` instead once the check's budget is spent.

    Raised here, in the validation's own course, and never by the profiler that finds the
    budget spent: CPython unhooks a profiler that raises, and an exception raised while a
    generator is finalized (jsonschema leaves many behind, suspended) is printed and
    dropped, so a raising profiler would now and then leave a check unbounded."""

    def checked(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if BUDGET.spent:
            raise OverBudget
        return keyword(validator, value, instance, schema)

    return checked


# -- the answer, quiet -----------------------------------------------------------------------

class _Object(dict[str, Any]):
    __slots__ = ()

    def __repr__(self) -> str:
        return "an object"


class _Array(list[Any]):
    __slots__ = ()

    def __repr__(self) -> str:
        return "an array"


class _Text(str):
    __slots__ = ()

    def __repr__(self) -> str:
        return "a string"


class _Integer(int):
    __slots__ = ()

    def __repr__(self) -> str:
        return "a number"


class _Real(float):
    __slots__ = ()

    def __repr__(self) -> str:
        return "a number"


def quiet(value: Any) -> Any:
    """``value`` (parsed JSON) with every object, array, string, key and number replaced by
    an equal one of a subclass whose ``repr`` is constant: jsonschema puts ``repr`` of the
    instance in every message it makes, wanted or not. (``True``, ``False`` and ``None``
    cannot be subclassed; their ``repr`` is short.) Recursive: the answer's nesting is
    capped by the decoder (``SYMFONIC_MAX_JSON_DEPTH``)."""
    kind = type(value)
    if kind is dict:
        return _Object({_Text(key): quiet(item) for key, item in value.items()})
    if kind is list:
        return _Array([quiet(item) for item in value])
    if kind is str:
        return _Text(value)
    if kind is int:
        return _Integer(value)
    if kind is float:
        return _Real(value)
    return value


# -- patterns on RE2 ------------------------------------------------------------------------

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


def regex(pattern: str) -> Any:
    """``pattern`` on RE2, or :class:`Refused` naming it (cut) and RE2's reason."""
    compiled = _compiled(str(pattern))
    if isinstance(compiled, str):
        shown = pattern if len(pattern) <= 60 else pattern[:57] + "..."
        raise Refused(f"{_SCHEMA}'s pattern {str(shown)!r} is not supported: {compiled}")
    return compiled


def _matches(compiled: Any, text: str) -> bool:
    """Whether ``compiled`` matches in ``text``, its work taken off the check's budget."""
    BUDGET.left -= compiled.programsize * (len(text) + 1)
    if BUDGET.left < 0 or BUDGET.spent:
        raise OverBudget
    return compiled.search(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _matches(regex(pattern), instance):
        yield ValidationError("does not match the pattern")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "object"):
        for pattern, subschema in patterns.items():
            compiled = regex(pattern)
            for key, value in instance.items():
                if _matches(compiled, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    """jsonschema's, with its patternProperties on RE2 and the extras in answer order."""
    if not validator.is_type(instance, "object"):
        return
    named, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    compiled = [regex(pattern) for pattern in patterns]
    extras = (k for k in instance if k not in named and not any(_matches(r, k) for r in compiled))
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and next(extras, None) is not None:
        yield ValidationError("additional properties are not allowed")


# -- branches tried until their first error, unique items hashed ----------------------------

def _any_of(validator: Any, branches: list[Any], instance: Any,
            schema: Any) -> Iterator[ValidationError]:
    for index, branch in enumerate(branches):  # (inline: a frame a level of a recursive one)
        if next(validator.descend(instance, branch, schema_path=index), None) is None:
            return
    yield ValidationError("is not valid under any of the given schemas")


def _one_of(validator: Any, branches: list[Any], instance: Any,
            schema: Any) -> Iterator[ValidationError]:
    found = 0
    for index, branch in enumerate(branches):
        if next(validator.descend(instance, branch, schema_path=index), None) is None:
            found += 1
            if found > 1:
                yield ValidationError("is valid under more than one of the given schemas")
                return
    if not found:
        yield ValidationError("is not valid under any of the given schemas")


def _canonical(value: Any) -> Any:
    """A hashable form of ``value`` equal exactly when JSON Schema calls the values equal:
    1 and 1.0 alike, ``true`` and 1 not, objects whatever their keys' order."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, dict):
        return frozenset((key, _canonical(item)) for key, item in value.items())
    if isinstance(value, list):
        return ("array", tuple(_canonical(item) for item in value))
    return value


def _unique_items(validator: Any, unique: Any, instance: Any,
                  schema: Any) -> Iterator[ValidationError]:
    """Linear in the array's size (jsonschema compares every pair it cannot sort: 5,000
    objects took 48 s)."""
    if (unique and validator.is_type(instance, "array")
            and len({_canonical(item) for item in instance}) != len(instance)):
        yield ValidationError("has non-unique elements")


#: jsonschema's keywords replaced; ``additionalProperties`` because jsonschema's matches
#: the patternProperties too (with ``re``).
KEYWORDS = {"pattern": _pattern, "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties, "anyOf": _any_of,
            "oneOf": _one_of, "uniqueItems": _unique_items}
