"""Every relative link in the README and the docs resolves inside the repository: the
file exists (and is not outside the checkout), and a `#fragment` names a heading of that
file. Links in code (fences and inline code spans) are not links; web links are not
followed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *ROOT.glob("*/README.md")])

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_CODE = re.compile(r"`+[^`\n]*`+")
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:...


def prose(text: str) -> str:
    """`text` without code: fenced blocks and inline code spans."""
    return _CODE.sub("", _FENCE.sub("", text))


def links(path: Path) -> list[str]:
    text = prose(path.read_text(encoding="utf-8"))
    return [m.group(1) for m in _INLINE.finditer(text)] + [m.group(1) for m in _REFERENCE.finditer(text)]


def anchors(path: Path) -> set[str]:
    """The fragments GitHub makes for a file's headings (lowercase, punctuation but
    `-` and `_` dropped, spaces to `-`; a repeated heading gets `-1`, `-2`...)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for match in _HEADING.finditer(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        title = re.sub(r"`([^`]*)`", r"\1", match.group(1))
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def broken(path: Path) -> list[str]:
    problems = []
    for target in links(path):
        if _EXTERNAL.match(target):
            continue
        file_part, _, fragment = target.partition("#")
        if not file_part:  # a heading of this page
            if fragment not in anchors(path):
                problems.append(f"{target}: no such heading here")
            continue
        resolved = (path.parent / file_part).resolve()
        if ROOT not in (resolved, *resolved.parents):
            problems.append(f"{target}: outside the repository")
        elif not resolved.exists():
            problems.append(f"{target}: no such file")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            problems.append(f"{target}: no heading #{fragment} in {resolved.relative_to(ROOT)}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(doc: Path) -> None:
    assert broken(doc) == []


def test_the_checker_sees_what_is_broken(tmp_path: Path) -> None:
    # The checker itself, on a page with one link of each kind (its own test: a checker
    # that finds nothing would pass every page).
    page = ROOT / "docs" / "protocol.md"
    sample = tmp_path / "page.md"
    sample.write_text("# Title\n\n## A `code` heading\n\n[ok](#title) [ok](#a-code-heading) "
                      "[bad](#nowhere) [gone](missing.md) [web](https://example.org/x) "
                      "`[code](nothere.md)`\n\n```\n[fenced](nothere.md)\n```\n[ref]: also-missing.md\n")
    problems = broken(sample)
    assert [p.split(":")[0] for p in problems] == ["#nowhere", "missing.md", "also-missing.md"]
    assert "script-model.md" in links(page)


def test_the_script_format_is_documented_here_and_linked() -> None:
    # The README and the start-up rules sent readers to "DESIGN.md section 4", a file
    # this repository does not have: the format is docs/script-model.md, and its field
    # tables name exactly the fields the parser takes.
    from acp_bridge.models import script

    assert "docs/script-model.md" in links(ROOT / "README.md")
    assert "script-model.md" in links(ROOT / "docs" / "protocol.md")
    for doc in DOCS:
        assert "DESIGN.md section 4" not in doc.read_text(encoding="utf-8"), doc
    text = (ROOT / "docs" / "script-model.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(\w+)` \|", text, re.M))
    assert documented == script._TOP_FIELDS | script._FIELDS


def test_every_error_code_the_agent_answers_with_is_in_the_table() -> None:
    # `data.code` is the stable word a program reads: each one the conversion point can
    # answer with (the words it writes, and those of the session errors it passes on)
    # is in docs/protocol.md's table of errors.
    import session.errors

    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    start = text.index("| code | when | `data.code` |")
    table = text[start:text.index("\n\n", start)]
    listed = set(re.findall(r"`(\w+)`", table))
    written = set(re.findall(r'"code": "(\w+)"', (ROOT / "acp_bridge" / "host" / "errors.py").read_text()))
    passed_on = {cls.code for cls in vars(session.errors).values()
                 if isinstance(cls, type) and issubclass(cls, session.errors.SessionError)
                 and cls is not session.errors.SessionError and not cls.bug}
    # Never answered: ids are the agent's own (a new one is never taken), and a closed
    # log is never written to by a request (the host forgets a session it closed).
    passed_on -= {"session_exists", "session_closed"}
    assert {"store_unavailable", "store_io"} <= written | passed_on
    assert sorted((written | passed_on) - listed) == []
