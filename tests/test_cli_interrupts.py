"""One rule for Ctrl-C (issue 36, point 2; docs/cli.md, "Interrupts"): anywhere in the
command line it prints one line, no traceback, and exits 130; what was written so far
is consistent and said (an index interrupted mid-way says how far it got, and the next
search goes on from there). Only `sessions index --watch` takes Ctrl-C as its normal
stop, says so, and exits 0.

The interrupt is raised where the work is (a monkeypatched step raising
KeyboardInterrupt, as Python's SIGINT handler does) in the in-process cases; one case
sends a real SIGINT to a real `acp-bridge` process."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acp_bridge.cli import main as cli
from acp_bridge.cli.sessions import indexer
from session import SessionStore, open_backend
from tests.support.logs import Script, write


def store_with(root: Path, sessions: int) -> list[str]:
    store = SessionStore(open_backend("jsonl", root))
    ids = []
    for n in range(sessions):
        log = store.create(cwd="/w")
        write(log, Script().text_turn(f"prompt {n}", f"answer number {n}"))
        ids.append(log.id)
        log.close()
    return ids


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def interrupt(*_: Any, **__: Any) -> Any:
    raise KeyboardInterrupt


@pytest.mark.parametrize(("argv", "where", "prog"), [
    (["sessions", "list"], "acp_bridge.cli.sessions.listing.list_text", "acp-bridge sessions list"),
    (["sessions"], "acp_bridge.cli.sessions.listing.list_text", "acp-bridge sessions"),
    (["sessions", "show", "{sid}"], "acp_bridge.cli.sessions.transcripts.show_chunks", "acp-bridge sessions show"),
    (["sessions", "export", "{sid}"], "acp_bridge.cli.sessions.transcripts.markdown_chunks",
     "acp-bridge sessions export"),
    (["sessions", "fork", "{sid}"], "acp_bridge.cli.sessions.fork.fork", "acp-bridge sessions fork"),
    (["sessions", "stats"], "acp_bridge.cli.sessions.stats.run_stats", "acp-bridge sessions stats"),
])
def test_an_interrupt_is_one_line_and_exit_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               argv: list[str], where: str, prog: str) -> None:
    [sid] = store_with(tmp_path / "store", 1)
    monkeypatch.setattr(where, interrupt)
    code, _, err = run_cli(*[a.replace("{sid}", sid) for a in argv], "--store", str(tmp_path / "store"))
    assert code == 130
    assert err.strip() == f"{prog}: interrupted"
    assert "Traceback" not in err


def test_an_interrupted_index_says_how_far_it_got_and_the_next_search_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    store_with(store, 5)
    real = indexer.index_session
    calls = []

    def third_is_interrupted(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real(*args, **kwargs)

    monkeypatch.setattr(indexer, "index_session", third_is_interrupted)
    code, out, err = run_cli("sessions", "search", "answer", "--store", str(store))
    assert (code, out) == (130, "")
    assert err.strip() == ("acp-bridge sessions search: interrupted; the index was left at 2 of 5 sessions; "
                           "the next search or index goes on from there")
    monkeypatch.setattr(indexer, "index_session", real)
    code, out, err = run_cli("sessions", "search", "number", "--store", str(store), "--json")
    assert code == 0, err
    assert out.count('"sessionId"') == 5


def test_index_watch_stops_on_ctrl_c_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    store_with(store, 2)
    monkeypatch.setattr("time.sleep", interrupt)
    monkeypatch.setattr("os.nice", lambda n: 0)
    code, _, err = run_cli("sessions", "index", "--watch", "--store", str(store))
    assert code == 0
    assert err.splitlines()[-1].startswith("acp-bridge sessions index: stopped watching ")
    assert "Traceback" not in err


def test_search_interrupted_is_not_no_hits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It was exit 0 with nothing on stdout: a script read it as "no hits"."""
    store = tmp_path / "store"
    store_with(store, 1)
    monkeypatch.setattr("acp_bridge.cli.sessions.search.run_search", interrupt)
    code, out, err = run_cli("sessions", "search", "x", "--store", str(store))
    assert (code, out, err.strip()) == (130, "", "acp-bridge sessions search: interrupted")


@pytest.mark.integration
def test_a_real_sigint_to_the_demo(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACP_BRIDGE_", "OPENAI_"))}
    proc = subprocess.Popen([sys.executable, "-m", "acp_bridge", "demo", "--store", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()  # the demo is under way
        assert first
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "acp-bridge demo: interrupted"
