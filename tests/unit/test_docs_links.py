"""Every link in the documentation leads somewhere inside the repository: a file that
exists, and, with a ``#fragment``, a heading of that file whose GitHub anchor it is.

Checked: every Markdown page of the repository (README.md, CHANGELOG.md, docs/, the chart's
README, any other). A relative link that leaves the repository is broken: a clone does not
have what lies beside it. A web link must go to public upstream documentation, one of
:data:`UPSTREAM_HOSTS` (it is not fetched); any other scheme or host is refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Not the repository's pages: generated, installed or built trees.
_NOT_PAGES = {"target", "dist", "build", "node_modules"}
PAGES = sorted(
    page for page in ROOT.rglob("*.md")
    if not any(part.startswith(".") or part in _NOT_PAGES or part.endswith(".egg-info")
               for part in page.relative_to(ROOT).parts[:-1])
)
#: Public upstream documentation a page may link to (the specifications and formats the
#: project follows); a page linking elsewhere on the web fails.
UPSTREAM_HOSTS = frozenset({
    "docs.ag-ui.com",            # the AG-UI protocol the gateway speaks
    "ai-sdk.dev",                # the AI SDK, whose UI message stream the gateway speaks
    "html.spec.whatwg.org",      # server-sent events
    "keepachangelog.com",        # CHANGELOG.md's format
    "opentelemetry.io",          # the messaging conventions the spans follow
    "semver.org",                # the version scheme
    "www.w3.org",                # W3C Trace Context, the trace headers carried
})

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
# [text](target) and ![alt](target), target optionally <...> and followed by a "title".
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * 3
            continue
        if fence is not None:
            if line.lstrip().startswith(fence):
                fence = None
            continue
        lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lowercased, punctuation dropped (but
    ``-`` and ``_``), each space a ``-``."""
    text = _INLINE_CODE.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of ``path``; a repeated heading gets ``-1``, ``-2``, ..."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in _prose_lines(path.read_text()):
        m = _HEADING.match(line)
        if m is None:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link in ``path``'s prose (not in code)."""
    found: list[tuple[int, str]] = []
    for number, line in _prose_lines(path.read_text()):
        prose = _INLINE_CODE.sub("", line)
        found.extend((number, m.group(1)) for m in _LINK.finditer(prose))
        if (m := _REFERENCE.match(prose)) is not None:
            found.append((number, m.group(1)))
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Broken links of ``path``: a file or heading that does not exist, a link that leaves
    ``root``, a web link to anything but :data:`UPSTREAM_HOSTS`."""
    problems: list[str] = []
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    for number, target in links(path):
        if not target:
            continue
        if _SCHEME.match(target) or target.startswith("//"):
            url = urlsplit(target)
            if url.scheme not in ("http", "https", "") or url.hostname not in UPSTREAM_HOSTS:
                problems.append(f"{where}:{number}: {target}: not public upstream documentation")
            continue
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not linked.is_relative_to(root):
            problems.append(f"{where}:{number}: {target}: leaves the repository")
            continue
        if not linked.exists():
            problems.append(f"{where}:{number}: {target}: no such file {linked}")
            continue
        if (
            fragment
            and linked.is_file()
            and linked.suffix == ".md"
            and unquote(fragment).lower() not in anchors(linked)
        ):
            problems.append(f"{where}:{number}: {target}: no heading #{fragment}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = ROOT / "README.md"
    linked = {
        (readme.parent / target.partition("#")[0]).resolve()
        for _, target in links(readme)
        if not _SCHEME.match(target)
    }
    unlinked = [
        str(page.relative_to(ROOT))
        for page in sorted((ROOT / "docs").glob("*.md"))
        if page.resolve() not in linked
    ]
    assert unlinked == []


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        (
            "Tools: publish, tail, replay, demo — and the publisher and reader SDKs",
            "tools-publish-tail-replay-demo--and-the-publisher-and-reader-sdks",
        ),
        ("`symfonic-stream tail RUN_ID`", "symfonic-stream-tail-run_id"),
        ("2. The raw topic: `symfonic.agent-events`", "2-the-raw-topic-symfonicagent-events"),
        ("Opt-in: `SYMFONIC_KAFKA_EXTRA_CONFIG`", "opt-in-symfonic_kafka_extra_config"),
        ("The [chart](helm/README.md) **values**", "the-chart-values"),
    ],
)
def test_slug_is_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Probe\n\n## A heading\n\n[ok](#a-heading) [ok](other.md#other-page)\n"
        "[missing file](nowhere.md) [missing anchor](other.md#no-such-heading)\n"
        "```\n[in code](ignored.md)\n```\n`[inline](ignored.md)` [web](https://semver.org/)\n"
    )
    problems = broken_links(page, root=tmp_path)
    assert [p.split(": ", 2)[1] for p in problems] == ["nowhere.md", "other.md#no-such-heading"]


def test_a_link_leaving_the_repository_or_to_the_web_is_found(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "SPEC.md").write_text("# Beside the repository\n")
    page = tmp_path / "repo" / "page.md"
    page.write_text("[beside](../SPEC.md) [web](https://example.com/x) "
                    "[mail](mailto:a@example.com) [upstream](https://semver.org/spec/v2.0.0.html)\n")
    problems = broken_links(page, root=tmp_path / "repo")
    assert [p.split(": ", 2)[1:] for p in problems] == [
        ["../SPEC.md", "leaves the repository"],
        ["https://example.com/x", "not public upstream documentation"],
        ["mailto:a@example.com", "not public upstream documentation"],
    ]


def test_every_page_of_the_repository_is_checked() -> None:
    names = {str(page.relative_to(ROOT)) for page in PAGES}
    assert {"README.md", "CHANGELOG.md", "docs/contract.md",
            "helm/symfonic-stream/README.md"} <= names
    assert not any(name.startswith((".venv", "native/target")) for name in names)


# -- citations of the contract -----------------------------------------------------------

#: "contract §5" (or "§2-§5" after it) in code, tests, schemas and pages.
_CITATION = re.compile(r"contract §(\d+)(?:-§?(\d+))?")
_SECTION = re.compile(r"^## §(\d+) ", re.MULTILINE)


def _tracked_texts() -> list[Path]:
    roots = ("symfonic_stream", "consumers", "tests", "schemas", "docs", "helm", "bench",
             "scripts", "web/src")
    found = [ROOT / "README.md"]
    for root in roots:
        found += [p for p in (ROOT / root).rglob("*")
                  if p.is_file() and p.suffix in {".py", ".md", ".json", ".yaml", ".tpl",
                                                    ".sh", ".js"}
                  and not any(part in _NOT_PAGES for part in p.relative_to(ROOT).parts)]
    return found


def test_every_contract_section_cited_exists_and_nothing_cites_a_file_outside() -> None:
    """Code and pages cite docs/contract.md's numbered sections ("contract §5"): each one
    cited is a heading there; and nothing cites the SPEC.md that lies outside a clone."""
    sections = {int(n) for n in _SECTION.findall((ROOT / "docs" / "contract.md").read_text())}
    assert sections == set(range(1, len(sections) + 1)), sections
    missing, outside = [], []
    for path in _tracked_texts():
        text = path.read_text(errors="replace")
        for match in _CITATION.finditer(text):
            first, last = int(match.group(1)), int(match.group(2) or match.group(1))
            if not set(range(first, last + 1)) <= sections:
                missing.append(f"{path.relative_to(ROOT)}: {match.group(0)}")
        if path.name != "test_docs_links.py" and re.search(r"\bSPEC\b(?!_)", text):
            outside.append(str(path.relative_to(ROOT)))
    assert not missing, missing
    assert not outside, f"cite docs/contract.md, not a SPEC the repository lacks: {outside}"
