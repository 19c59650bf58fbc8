"""Progress on long work (issue 36, point 7): the index's passes and a fork's copy show a
line on a terminal's stderr, erased when they end, and nothing in a pipe."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from acp_bridge.cli.sessions import progress as progress_module
from acp_bridge.cli.sessions.progress import Progress
from tests.test_sessions_cli import cli, record


def test_the_line_says_what_is_done() -> None:
    p = Progress("acp-bridge sessions index: indexing", enabled=False)
    start = time.monotonic()
    p.set(3210, "sessions", 5000)
    assert p.text(start + 2.4) == "acp-bridge sessions index: indexing: 3,210 of 5,000 sessions done (2 s)"
    p.set(12, "records")
    assert p.text(start) == "acp-bridge sessions index: indexing: 12 records read (0 s)"
    p.set(2_500_000, "bytes")
    assert p.text(start) == "acp-bridge sessions index: indexing: 2.5 MB read (0 s)"
    ticking = Progress("acp-bridge sessions fork", enabled=True)
    ticking.tick("copying session X")
    ticking.done()
    assert ticking.text(start + 7) .startswith("acp-bridge sessions fork: copying session X (")


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """stderr as a terminal would take it, the line shown at once."""
    err = io.StringIO()
    monkeypatch.setattr(progress_module, "on_terminal", lambda: True)
    monkeypatch.setattr(progress_module, "SHOW_AFTER", 0.0)
    return err


def store_of(tmp_path: Path, count: int) -> Path:
    store, work = tmp_path / "store", tmp_path / "work"
    work.mkdir()
    for n in range(count):
        record(store, "jsonl", work, [{"text": f"answer {n}"}], [f"prompt {n}"], base_ms=1_700_000_000_000 + n)
    return store


def test_index_builds_show_progress_on_a_terminal_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = store_of(tmp_path, 3)
    piped = cli("--store", str(store), "index", "--rebuild")
    assert piped.code == 0 and "\r" not in piped.err and "indexing" not in piped.err
    monkeypatch.setattr(progress_module, "on_terminal", lambda: True)
    monkeypatch.setattr(progress_module, "SHOW_AFTER", 0.0)
    monkeypatch.setattr(progress_module, "EVERY", 0.0)
    for args in (("index", "--rebuild"), ("search", "answer")):
        shown = cli("--store", str(store), *args)
        assert f"\r\x1b[Kacp-bridge sessions {args[0]}: indexing: 1 of 3 sessions done (0 s)" in shown.err
        assert "indexing: 3 of 3 sessions done (0 s)\r\x1b[Kacp-bridge" in shown.err or \
            shown.err.endswith("indexing: 3 of 3 sessions done (0 s)\r\x1b[K"), shown.err  # erased
        if args[0] == "index":
            (store / "index" / "search.sqlite3").unlink()  # the first search on a store builds it


def test_a_fork_shows_its_time_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from session import SessionStore

    store = store_of(tmp_path, 1)
    sid = next((store / "sessions").glob("*.jsonl")).stem
    made = SessionStore.fork

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.3)  # a big session's copy
        return made(*args, **kwargs)

    monkeypatch.setattr(SessionStore, "fork", slow)
    piped = cli("--store", str(store), "fork", sid)
    assert piped.code == 0 and piped.err == ""
    monkeypatch.setattr(progress_module, "on_terminal", lambda: True)
    monkeypatch.setattr(progress_module, "SHOW_AFTER", 0.0)
    shown = cli("--store", str(store), "fork", sid)
    assert shown.code == 0
    assert f"\r\x1b[Kacp-bridge sessions fork: copying session {sid} (0 s)" in shown.err
    assert shown.err.endswith("\r\x1b[K")  # erased before the id is printed


def test_an_import_shows_its_files_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`acp-bridge import` of many files (issue 36, point 7): "N of M files" on a terminal's
    stderr when stdout (its line per session) is not one; nothing in a pipe."""
    import shutil

    from acp_bridge.cli.importer.main import main as import_main

    fixture = next((Path(__file__).parent / "recorded" / "native" / "claude-code-2.1.197").glob("*.jsonl"))
    native = tmp_path / "native"
    native.mkdir()
    shutil.copy(fixture, native / fixture.name)
    assert import_main([str(native), "--store", str(tmp_path / "piped")]) == 0
    assert "files" not in capsys.readouterr().err
    monkeypatch.setattr(progress_module, "_isatty", lambda stream: stream is sys.stderr)
    monkeypatch.setattr(progress_module, "SHOW_AFTER", 0.0)
    monkeypatch.setattr(progress_module, "EVERY", 0.0)
    assert import_main([str(native), "--store", str(tmp_path / "shown")]) == 0
    err = capsys.readouterr().err
    assert "\r\x1b[Kacp-bridge import: 1 of 1 files done (0 s)" in err and err.endswith("\r\x1b[K"), err
