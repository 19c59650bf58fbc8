"""A search hit leads to its message (issue 35): in Debian's headless Chromium
(tests/support/browser.py), a hit of `sessions serve`'s search opens its session
scrolled to the tool call, step or turn whose text matched, and the exported HTML page
has an anchor per turn, step and tool call that a link scrolls to. The session is long
(40 turns), so a page that opened at its top would not show the hit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import Browser, chromium
from tests.support.html_sessions import Served
from tests.support.logs import Script
from tests.support.search_store import DAY0, add_session
from tests.test_html_export import export

pytestmark = [pytest.mark.browser, pytest.mark.integration]

CALL = "call 7/ü"  # a call id with a space, a slash and a letter beyond ASCII


def long_session() -> Script:
    s = Script()
    for turn in range(1, 41):
        if turn == 33:  # a tool call whose output holds the word
            s.start_turn("read the zoo").start_step()
            s.message("reading", calls=(CALL,))
            s.call(CALL).result(CALL, "a wolverine in the log")
            s.end_step().start_step().message("read").end_step().end_turn()
        elif turn == 36:  # an answer in the second step
            s.start_turn("and now").start_step().message("first").end_step()
            s.start_step().message("the ocelot sleeps").end_step().end_turn()
        else:
            s.text_turn(f"prompt number {turn} " + "filler words " * 30, "answer " * 40)
    return s


@pytest.fixture(scope="module")
def browser() -> Any:
    opened = Browser(chromium(), width=1000, height=700)
    try:
        yield opened
    finally:
        opened.close()


# Where the page stands: the fragment, how far it is scrolled, and where the element the
# fragment names is in the window (its top, in CSS pixels).
WHERE = """(() => {
  const id = decodeURIComponent(location.hash.slice(1));
  const target = document.getElementById(location.hash.slice(1)) || document.getElementById(id);
  return {hash: location.hash, scrolled: window.scrollY,
          top: target ? Math.round(target.getBoundingClientRect().top) : null,
          tag: target ? target.tagName + '.' + target.className : null};
})()"""


def test_a_hit_opens_its_session_scrolled_to_it(browser: Browser, tmp_path: Path) -> None:
    root = tmp_path / "store"
    sid = add_session(root, "jsonl", str(tmp_path), long_session(), DAY0)
    with Served(root, "jsonl", "--index", str(tmp_path / "index.sqlite3")) as served:
        for word, anchor, tag in (("wolverine", "#turn-33-call-call%207%2F%C3%BC", "DETAILS.tool"),
                                  ("ocelot", "#turn-36-step-2", "DIV.step"),
                                  ("zoo", "#turn-33", "SECTION.turn st-completed")):
            browser.goto(f"{served.url}search?q={word}")
            href = browser.evaluate("document.querySelector('ol.hits li a').getAttribute('href')")
            assert href == f"session/{sid}{anchor}"
            browser.submit("document.querySelector('ol.hits li a').click()")
            where = browser.evaluate(WHERE)
            assert where["hash"] == anchor and where["tag"] == tag, where
            assert where["scrolled"] > 1000 and 0 <= where["top"] <= 5, where  # at the top of the window
    assert served.returncode == 0


def test_the_exported_page_has_an_anchor_per_turn_step_and_call(browser: Browser, tmp_path: Path) -> None:
    root = tmp_path / "store"
    sid = add_session(root, "jsonl", str(tmp_path), long_session(), DAY0)
    page = tmp_path / "page.html"
    page.write_text(export(root, "jsonl", sid), encoding="utf-8")
    browser.goto(page.as_uri())
    anchors = browser.evaluate("[...document.querySelectorAll('[id]')].map((e) => e.id)")
    assert [a for a in anchors if a.count("-") == 1] == [f"turn-{n}" for n in range(1, 41)]
    assert "turn-33-call-call%207%2F%C3%BC" in anchors and "turn-36-step-2" in anchors
    assert len(anchors) == len(set(anchors)) == 40 + 42 + 1  # turns, steps (two in 33 and 36), the call
    for anchor in ("#turn-33-call-call%207%2F%C3%BC", "#turn-36-step-2", "#turn-20"):
        browser.goto("about:blank")  # a load of its own, not a move within the page
        browser.goto(page.as_uri() + anchor)
        where = browser.evaluate(WHERE)
        assert where["hash"] == anchor and where["scrolled"] > 1000 and 0 <= where["top"] <= 5, where
