"""A real browser for the HTML tests: Debian's headless Chromium, driven through the
DevTools protocol over a pipe (`--remote-debugging-pipe`: the protocol's JSON messages,
NUL-separated, on file descriptors 3 and 4). No websocket, no listening port, no
driver: the browser is a child process, and the test reads what it shows (the DOM,
through `Runtime.evaluate`) and takes screenshots (`Page.captureScreenshot`).

`chromium()` finds the browser (`$ACP_BRIDGE_TEST_CHROMIUM`, else `chromium` on PATH)
or skips the test with the reason; with `$ACP_BRIDGE_TEST_BROWSER=required` (.ci/run
sets it) a missing browser fails the test instead.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

# The flags that work on this kind of machine (as root: no sandbox). Nothing reaches the
# network on its own: no component updates, no sync, no QUIC, no background traffic.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--hide-scrollbars", "--mute-audio"]
TIMEOUT = 20.0  # seconds for one DevTools answer or one page load


def chromium() -> str:
    """The browser's path, or the test is skipped (failed, where it is required)."""
    given = os.environ.get("ACP_BRIDGE_TEST_CHROMIUM")
    if given:
        if not os.access(given, os.X_OK):
            pytest.fail(f"$ACP_BRIDGE_TEST_CHROMIUM={given} is not an executable")
        return given
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    reason = "headless Chromium is not installed (apt-get install -y chromium)"
    if os.environ.get("ACP_BRIDGE_TEST_BROWSER") == "required":
        pytest.fail(reason + "; $ACP_BRIDGE_TEST_BROWSER=required")
    pytest.skip(reason)


class BrowserError(Exception):
    pass


class Browser:
    """One headless Chromium, one page (tab). `goto(url)` loads and waits for the load
    event; `evaluate(js)` returns the value; `screenshot(path)` writes a PNG."""

    def __init__(self, path: str, *, width: int = 1200, height: int = 900) -> None:
        self._profile = tempfile.mkdtemp(prefix="acp-bridge-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The browser reads commands on fd 3 and writes answers on fd 4.
        # (An end may already be fd 3 or 4, where dup2 would be a no-op that leaves it
        # close-on-exec: each is moved above 4 first.)
        def child_fds() -> None:
            high_r, high_w = os.dup(to_browser_r) + 10, os.dup(from_browser_w) + 10
            os.dup2(to_browser_r, high_r)
            os.dup2(from_browser_w, high_w)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        # Its stderr (D-Bus complaints, mostly) to a file: a pipe nobody drains could fill
        # and stop the browser.
        self._log = Path(self._profile, "stderr.log").open("wb")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            [path, *FLAGS, f"--user-data-dir={self._profile}", "--remote-debugging-pipe",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log,
            preexec_fn=child_fds, close_fds=False,  # dup2'd fds are inheritable; the
        )                                           # pipes' own ends (os.pipe) are not
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.console: list[str] = []  # console messages and CSP reports, as the page logged them
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.call("Target.attachToTarget",
                                  {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(domain, session=True)

    # --- the protocol ---------------------------------------------------------------

    def _read_message(self, deadline: float) -> dict[str, Any]:
        import select

        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("no answer from the browser in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                data = os.read(self._from_browser, 1 << 20)
                if not data:
                    raise BrowserError(f"the browser exited: {self._stderr_tail()}")
                self._buffer += data
        message, self._buffer = self._buffer.split(b"\0", 1)
        parsed: dict[str, Any] = orjson.loads(message)
        return parsed

    def _note(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        params = message.get("params") or {}
        if method == "Runtime.consoleAPICalled":
            self.console.append(" ".join(str(a.get("value", a.get("description", "")))
                                         for a in params.get("args", [])))
        elif method == "Log.entryAdded":
            self.console.append(str(params.get("entry", {}).get("text", "")))
        self.events.append(message)

    def call(self, method: str, params: dict[str, Any] | None = None, *,
             session: bool = False) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_browser, orjson.dumps(message) + b"\0")
        deadline = time.monotonic() + TIMEOUT
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result
            self._note(answer)

    def _wait_for(self, method: str, deadline: float) -> None:
        while True:
            message = self._read_message(deadline)
            self._note(message)
            if message.get("method") == method:
                return

    # --- what the tests use ---------------------------------------------------------

    def goto(self, url: str) -> None:
        """Load `url` and wait for its load event (a page whose scripts are blocked
        loads all the same)."""
        self.events.clear()
        self.console.clear()
        answer = self.call("Page.navigate", {"url": url}, session=True)
        if answer.get("errorText"):
            raise BrowserError(f"{url}: {answer['errorText']}")
        self._wait_for("Page.loadEventFired", time.monotonic() + TIMEOUT)

    def submit(self, expression: str) -> None:
        """Run `expression` (which sends a form or follows a link, as a click would) and
        wait for the page it leads to."""
        self.events.clear()
        self.console.clear()
        self.evaluate(expression)
        self._wait_for("Page.loadEventFired", time.monotonic() + TIMEOUT)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (run by the test through
        DevTools, which the page's Content-Security-Policy does not govern)."""
        answer = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                           session=True)
        if "exceptionDetails" in answer:
            raise BrowserError(f"{expression}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """The whole page as a PNG at `path`."""
        answer = self.call("Page.captureScreenshot",
                           {"format": "png", "captureBeyondViewport": True}, session=True)
        path.write_bytes(base64.b64decode(answer["data"]))
        return path

    def _stderr_tail(self) -> str:
        return Path(self._profile, "stderr.log").read_bytes().decode(errors="replace")[-2000:]

    def close(self) -> None:
        with contextlib.suppress(BrowserError, OSError):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_browser, self._from_browser):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._log.close()
        shutil.rmtree(self._profile, ignore_errors=True)
