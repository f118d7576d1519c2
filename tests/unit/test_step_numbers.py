"""Every step number in prose is checked against the code (issue 45).

Two protocols have numbered steps: the commit protocol (engine/transaction.py's docstring,
nine steps) and a task's set-up (engine/setup.py's docstring, five). Each list is the code's:
every step is named again, once and in order, by a ``# N. name`` comment at the line that
does it, in the module the docstring says, and docs/engine.md repeats the same names. Any
other mention of a step, in the code or the docs, names the step beside its number
("commit step 6, send offsets", "set-up step 3 (restore)"), so a renumbering that leaves a
mention behind fails here instead of misleading a reader (the set-up's restore was "step 2"
in one module and "step 3" in another until this test).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from symfonic_stream.engine import setup, transaction

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "symfonic_stream"
ENGINE_DOC = ROOT / "docs" / "engine.md"

_ITEM = re.compile(r"^(\d)\. \*\*(.+?)\*\*", re.MULTILINE)
_COMMENT = re.compile(r"^\s*# (\d)\. ([a-z][a-z ]*[a-z])\b", re.MULTILINE)


def listed(text: str) -> list[tuple[int, str]]:
    """The first numbered list of bold names in ``text``: [(number, name)]."""
    items = [(int(n), name) for n, name in _ITEM.findall(text)]
    first = [items[0]] if items else []
    for item in items[1:]:
        if item[0] != first[-1][0] + 1:
            break
        first.append(item)
    return first


COMMIT = listed(transaction.__doc__ or "")
SETUP = listed(setup.__doc__ or "")
#: Where each commit step is done, as transaction.py's docstring says.
COMMIT_HOMES = {1: "engine/task.py", 9: "engine/task.py", 2: "engine/transaction.py",
                8: "engine/transaction.py", **dict.fromkeys(range(3, 8), "kafka/producer.py")}


def test_the_protocols_are_numbered_lists() -> None:
    assert [n for n, _ in COMMIT] == list(range(1, 10))
    assert [n for n, _ in SETUP] == list(range(1, 6))


def _comments(relative: str) -> list[tuple[int, str]]:
    text = (PACKAGE / relative).read_text()
    return [(int(n), name) for n, name in _COMMENT.findall(text)]


def test_each_commit_step_is_named_once_in_order_where_the_docstring_says() -> None:
    homes = sorted(set(COMMIT_HOMES.values()))
    found = {home: _comments(home) for home in homes}
    for home in homes:
        want = [(n, name) for n, name in COMMIT if COMMIT_HOMES[n] == home]
        assert found[home] == want, home


def test_each_set_up_step_is_named_once_in_order() -> None:
    assert _comments("engine/setup.py") == SETUP


@pytest.mark.parametrize(("heading", "steps"), [
    ("**The commit protocol**", COMMIT), ("### Set-up:", SETUP)])
def test_docs_engine_md_lists_the_same_steps(heading: str, steps: list[tuple[int, str]]
                                              ) -> None:
    text = ENGINE_DOC.read_text()
    assert heading in text
    assert listed(text[text.index(heading):]) == steps


# -- every other mention names its step ---------------------------------------------------

_MENTION = re.compile(r"([^.;:|]{0,60}?)\b(commit |set-up )?step (\d)\b([^.;:|]{0,60})",
                      re.IGNORECASE)


def _words(name: str) -> set[str]:
    return {w for w in re.split(r"\W+", name.lower()) if len(w) > 3 or w in {"take"}}


def mentions(text: str, default: str | None) -> list[str]:
    """Each mention of one step in ``text`` that does not name it: the protocol is the
    mention's ("commit step", "set-up step") or ``default``; the name, or one of its
    words, must be beside the number, in the same sentence."""
    bad = []
    for match in _MENTION.finditer(text):
        before, qualifier, number_text, after = match.groups()
        kind = (qualifier or default or "").strip().lower()
        if kind not in {"commit", "set-up"}:
            bad.append(f"{match.group(0)!r}: say which protocol (commit step, set-up step)")
            continue
        steps = dict(COMMIT if kind == "commit" else SETUP)
        number = int(number_text)
        if number not in steps:
            bad.append(f"{match.group(0)!r}: {kind} has no step {number}")
        elif not _words(steps[number]) & (_words(after) | _words(before)):
            bad.append(f"{match.group(0)!r}: name it ({kind} step {number}, "
                       f"{steps[number]})")
    return bad


def _without_lists(text: str) -> str:
    return _ITEM.sub("", _COMMENT.sub("", text))


#: The protocol a bare "step N" means in a module (elsewhere it must say which).
DEFAULTS = {"engine/setup.py": "set-up", "state/restore.py": "set-up",
            "engine/transaction.py": "commit", "kafka/producer.py": "commit"}


def test_the_check_catches_a_mention_that_drifted() -> None:
    assert mentions("the seek after set-up step 4 (position)", None) == []
    assert mentions("refused at commit step 6, send offsets", None) == []
    assert mentions("the restore (set-up step 3)", None) == []
    assert mentions("the seek after step 3 makes it start over", "set-up") != []
    assert mentions("the restore (set-up step 2)", None) != []
    assert mentions("at step 6", None) != []


def test_every_mention_of_a_step_names_it() -> None:
    bad = []
    for file in sorted(PACKAGE.rglob("*.py")):
        relative = file.relative_to(PACKAGE).as_posix()
        text = file.read_text()
        if relative in {"engine/transaction.py", "engine/setup.py"}:
            text = text.replace(transaction.__doc__ or "", "").replace(setup.__doc__ or "", "")
        bad += [f"symfonic_stream/{relative}: {m}"
                for m in mentions(_without_lists(text), DEFAULTS.get(relative))]
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        bad += [f"{doc.relative_to(ROOT)}: {m}"
                for m in mentions(_without_lists(doc.read_text()), None)]
    assert bad == [], "\n".join(bad)
