"""The HTML transcript in a real browser (issue 26, point 4): Debian's headless Chromium
(tests/support/browser.py, driven over the DevTools protocol on a pipe) loads the
exported file and the pages `acp-bridge sessions serve` serves, all made from the hostile
agent's recordings (tests/support/xss_agent.py: every string tries to set the title to
PWNED or add an element #pwned). It checks what is shown (the DOM: turns and their
states, collapsed and open parts, the rendered Markdown), that no injected script ran
and nothing even tried (no CSP report: every payload was text), and that the policy
alone stops a script that escaping would have let through. Screenshots are kept under
pytest's tmp dir; their paths are printed (`pytest -s` or -rA shows them).

Skipped when Chromium is not installed; .ci/run installs it and makes these required.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import Browser, chromium
from tests.support.html_sessions import PROMPT, Served
from tests.support.xss_agent import TAGS
from tests.test_html_export import export, kind, stores

__all__ = ["kind", "stores"]  # the module-scoped fixtures, shared with the export's tests

pytestmark = [pytest.mark.browser, pytest.mark.integration]

# What the page shows, read in the page (the test's own script, run through DevTools,
# which the page's policy does not govern).
LOOK = """(() => {
  const text = (sel) => [...document.querySelectorAll(sel)].map((e) => e.innerText.trim());
  const attrs = [...document.querySelectorAll('*')].flatMap((e) => [...e.attributes].map((a) => a.name));
  return {
    title: document.title,
    pwned: document.getElementById('pwned') !== null,
    active: document.querySelectorAll('script, img, iframe, svg, object, embed, form, base, link').length,
    handlers: attrs.filter((name) => name.startsWith('on')).length,
    turns: [...document.querySelectorAll('section.turn')].map((s) => s.className),
    statuses: text('section.turn .turn-status'),
    details: [...document.querySelectorAll('details')].map((d) => [d.className, d.open]),
    links: [...document.querySelectorAll('a[href]')].filter((a) => !a.getAttribute('href').startsWith('#'))
      .map((a) => a.href),
    body: document.body.innerText,
    headings: text('.md h1'),
    borderOfFirstTurn: ((e) => e && getComputedStyle(e).borderLeftWidth)(document.querySelector('section.turn, table')),
  };
})()"""


@pytest.fixture(scope="module")
def browser() -> Any:
    opened = Browser(chromium(), width=1100, height=900)
    try:
        yield opened
    finally:
        opened.close()


def shot(browser: Browser, tmp_path: Path, name: str) -> Path:
    path = browser.screenshot(tmp_path / f"{name}.png")
    assert path.stat().st_size > 10_000  # a page, not a blank
    print(f"screenshot: {path}")
    return path


def csp_reports(browser: Browser) -> list[str]:
    return [line for line in browser.console if "Content Security Policy" in line]


def test_the_exported_page_in_a_browser(browser: Browser, kind: str, stores: tuple[Path, dict[str, str]],
                                        tmp_path: Path) -> None:
    root, ids = stores
    page = tmp_path / "wrapped.html"
    page.write_text(export(root, kind, ids["wrapped"]), encoding="utf-8")
    browser.goto(page.as_uri())
    seen = browser.evaluate(LOOK)
    # Nothing injected ran, and nothing tried: no element or handler of theirs exists, and
    # the policy had nothing to refuse (it did let our style sheet in: the turn's border).
    assert seen["title"].startswith(PROMPT[:40]) and seen["title"].endswith(" — acp-bridge")
    assert (seen["pwned"], seen["active"], seen["handlers"]) == (False, 0, 0)
    assert csp_reports(browser) == []
    assert seen["borderOfFirstTurn"] == "5px"
    # What a reader sees.
    assert seen["turns"] == ["turn st-completed", "turn st-error", "turn st-cancelled"]
    assert seen["statuses"][0::2] == ["completed", "cancelled (by session/cancel)"]
    assert seen["statuses"][1].startswith("error: failed <script>")
    assert seen["details"] == [["thinking", False], ["tool", False], ["diff", True]]
    assert seen["headings"] == ["Result"]
    assert seen["links"] == ["https://example.org/ok"]  # the one good link of the answer (and anchors)
    body = seen["body"]
    assert PROMPT in body and "<div onmouseover=\"document.title='PWNED'\">a raw HTML block</div>" in body
    assert "permission: allow_once" in body and "+b <script>" in body
    assert "tokens 1,234 in / 0 out" in body and "wrapped by acp-bridge" in body
    assert f"output {TAGS}" not in body  # inside a closed <details>: not shown ...
    browser.evaluate("document.querySelectorAll('details').forEach((d) => d.open = true)")
    assert f"output {TAGS}" in browser.evaluate("document.body.innerText")  # ... until opened
    assert not browser.evaluate("document.getElementById('pwned') !== null")
    shot(browser, tmp_path, f"export-{kind}")

    browser.goto((lambda p: (p.write_text(export(root, kind, ids["crashed"]), encoding="utf-8"), p)[1])(
        tmp_path / "crashed.html").as_uri())
    seen = browser.evaluate(LOOK)
    assert seen["turns"] == ["turn st-interrupted"]
    assert seen["statuses"] == ["interrupted (crash; not yet repaired on disk)"]
    assert "has not been repaired on disk yet" in seen["body"]
    assert (seen["pwned"], seen["active"], seen["handlers"], csp_reports(browser)) == (False, 0, 0, [])


def test_the_policy_alone_stops_a_script(browser: Browser, kind: str, stores: tuple[Path, dict[str, str]],
                                         tmp_path: Path) -> None:
    """Had escaping failed somewhere, the page's policy would still refuse the script;
    and the same page without the policy does run it (so the check above can see a
    script that runs)."""
    root, ids = stores
    exported = export(root, kind, ids["edit"])
    leak = (f"<script>{'document.title=`PWNED`'}</script>"
            "<img src=x onerror=\"document.body.appendChild(Object.assign("
            "document.createElement('b'),{id:'pwned'}))\">")
    broken = exported.replace("<main>", "<main>" + leak, 1)
    guarded, bare = tmp_path / "guarded.html", tmp_path / "bare.html"
    guarded.write_text(broken, encoding="utf-8")
    start = broken.index('<meta http-equiv="Content-Security-Policy"')
    bare.write_text(broken[:start] + broken[broken.index(">", start) + 1:], encoding="utf-8")

    browser.goto(guarded.as_uri())
    assert browser.evaluate("document.title") == "edit a.txt — acp-bridge"
    assert browser.evaluate("document.getElementById('pwned')") is None
    reports = csp_reports(browser)
    assert any("inline script" in r for r in reports) and any("inline event handler" in r for r in reports)

    browser.goto(bare.as_uri())
    browser.evaluate("new Promise((done) => setTimeout(done, 200))")  # the image's error event
    assert browser.evaluate("document.title") == "PWNED"
    assert browser.evaluate("document.getElementById('pwned') !== null")


def test_the_served_pages_in_a_browser(browser: Browser, kind: str, stores: tuple[Path, dict[str, str]],
                                       tmp_path: Path) -> None:
    root, ids = stores
    with Served(root, kind) as served:
        browser.goto(served.url)
        seen = browser.evaluate(LOOK)
        assert seen["title"] == "Sessions — acp-bridge"
        # Two active elements, ours: the search form (test_the_search_box_in_a_browser) and
        # the live page's script (tests/test_html_live.py).
        assert (seen["pwned"], seen["active"], seen["handlers"], csp_reports(browser)) == (False, 2, 0, [])
        assert browser.evaluate("document.querySelector('nav form.search') !== null")
        rows = browser.evaluate("[...document.querySelectorAll('table.sessions tbody tr')].length")
        assert rows == 3
        assert sorted(seen["links"]) == sorted(f"{served.url}session/{sid}" for sid in ids.values())
        shot(browser, tmp_path, f"served-list-{kind}")
        # Follow the list's link to the wrapped session, as a person would.
        href = browser.evaluate(f"document.querySelector('a[href=\"session/{ids['wrapped']}\"]').href")
        assert href == f"{served.url}session/{ids['wrapped']}"
        browser.goto(href)
        seen = browser.evaluate(LOOK)
        assert seen["turns"] == ["turn st-completed", "turn st-error", "turn st-cancelled"]
        # One active element, ours: the live page's script.
        assert (seen["pwned"], seen["active"], seen["handlers"], csp_reports(browser)) == (False, 1, 0, [])
        assert seen["borderOfFirstTurn"] == "5px"  # the header's policy lets our sheet in
        assert seen["body"].startswith("← All sessions")
        shot(browser, tmp_path, f"served-session-{kind}")
        browser.goto(served.url.replace(served.token, "x" * len(served.token)))
        assert browser.evaluate("document.body.innerText").strip() == "Forbidden."
    assert served.returncode == 0


def test_the_search_box_in_a_browser(browser: Browser, kind: str, stores: tuple[Path, dict[str, str]],
                                     tmp_path: Path) -> None:
    """A person types words in the list's box and sends it: the browser's policy lets
    the form go (to the server itself), the results show the hostile prompts as text,
    their matches marked, and a hit leads to its turn in the transcript."""
    root, ids = stores
    with Served(root, kind, "--index", str(tmp_path / "index.sqlite3")) as served:
        browser.goto(served.url)
        browser.submit("document.querySelector('form.search input[name=q]').value = 'PWNED';"
                       "document.querySelector('form.search select').value = 'error';"
                       "document.querySelector('form.search').requestSubmit()")
        assert browser.evaluate("location.href") == f"{served.url}search?q=PWNED&ended=error"
        seen = browser.evaluate(LOOK)
        assert seen["title"] == "Search: PWNED — acp-bridge"
        # The form is ours (one); nothing of theirs is active, nothing ran, nothing was refused.
        assert (seen["pwned"], seen["active"], seen["handlers"], csp_reports(browser)) == (False, 1, 0, [])
        hits = browser.evaluate("[...document.querySelectorAll('ol.hits li')].map((li) => ["
                                "li.querySelector('a').getAttribute('href'), li.querySelector('.list-status').innerText,"
                                "[...li.querySelectorAll('mark')].map((m) => m.innerText)])")
        assert [h[:2] for h in hits] == [[f"session/{ids['wrapped']}#turn-2", hits[0][1]]]
        assert hits[0][1].startswith("error") and set(hits[0][2]) == {"PWNED"}
        assert "fail <script>" in seen["body"]  # the prompt, as text
        assert browser.evaluate("document.querySelector('form.search input[name=q]').value") == "PWNED"
        shot(browser, tmp_path, f"served-search-{kind}")
        browser.submit("document.querySelector('ol.hits li a').click()")
        assert browser.evaluate("location.href") == f"{served.url}session/{ids['wrapped']}#turn-2"
        seen = browser.evaluate(LOOK)
        assert seen["turns"] == ["turn st-completed", "turn st-error", "turn st-cancelled"]
        assert browser.evaluate("document.getElementById('turn-2').className") == "turn st-error"
        assert (seen["pwned"], seen["active"], seen["handlers"], csp_reports(browser)) == (False, 1, 0, [])
    assert served.returncode == 0
