"""`acp-bridge sessions show` and `export` stream the log in one pass (issue 17, item 4):
peak memory stays far below the log's size on both backends (real processes, the peak
RSS read from the kernel), the turns before a damaged one are out before the error,
and a long run to a file shows its progress on a terminal's stderr. The full-size
measurement (a 1M-event session) is bench/sessions_memory.py; its smoke test is
tests/test_bench_sessions_smoke.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp_bridge.cli.sessions import progress
from bench.sessions_memory import ROOT, run_command
from session import SessionStore, open_backend
from tests.support.logs import Script
from tests.support.tamper import replace_event
from tests.test_load_memory import LOG_MB, build

SESSIONS = [sys.executable, "-m", "acp_bridge", "sessions"]


@pytest.mark.long
@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.integration
def test_show_and_export_of_a_large_log_stay_small(tmp_path: Path, backend: str) -> None:
    """A 60 MB log of big tool results: reading it whole (as before) took 1.3-6x the
    log's size; streamed, the peak is the interpreter's plus a turn or a block."""
    store = tmp_path / "store"
    sid, _ = build(store, backend)
    for command in (["show", sid], ["show", sid, "--full"], ["export", sid],
                    ["export", sid, "--format", "html"], ["export", sid, "--format", "jsonl"]):
        run = run_command(ROOT, store, backend, command)
        assert run["code"] == 0, run["stderr"]
        assert run["out_bytes"] > (LOG_MB * 1_000_000 if command[0] == "export" else 100_000)
        # Read whole (before): 78-388 MB. Streamed: about 20 MB, the interpreter's own.
        assert run["peak_mb"] < LOG_MB * 0.75, f"{command}: peak RSS {run['peak_mb']:.0f} MB for a {LOG_MB} MB log"


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.integration
def test_the_turns_before_damage_are_shown_then_the_error(tmp_path: Path, backend: str) -> None:
    store = SessionStore(open_backend(backend, tmp_path))
    log = store.create(cwd="/w")
    # Turns bigger than a read block (256 KB): the damage is found in a later block.
    big = " ".join(f"w{i}" + "x" * 3_000 for i in range(100))  # 100 chunks, 300 KB
    script = Script().text_turn("q1", f"first answer {big}").text_turn("q2", f"second answer {big}")
    script.text_turn("q3", "third answer")
    log.extend(script.items)
    log.close()
    events = len(script.items)
    # A chunk of the last turn names a step that does not exist: `load` refuses the log.
    bad_seq = next(i for i in range(events - 1, -1, -1) if script.items[i][0] == "assistant/chunk")
    data = b'{"turn":3,"step":7,"chunk":{"type":"text","text":"x"}}'
    if backend == "jsonl":
        data = b'{"type":"assistant/chunk","seq":%d,"time":1,"data":%s}' % (bad_seq, data)
    replace_event(store.backend, log.id, bad_seq, data)
    store.close()
    for command in (["show", log.id], ["export", log.id]):
        proc = subprocess.run([*SESSIONS, "--store", str(tmp_path), "--backend", backend, *command],
                              capture_output=True, timeout=30)
        assert proc.returncode == 1
        out = proc.stdout.decode()
        # The check runs a block at a time: turn 1 is out before the block with the damage.
        assert "Turn 1 — completed" in out and "first answer" in out and "third answer" not in out
        assert f"breaks the log invariants at seq {bad_seq}" in proc.stderr.decode()


def test_progress_is_one_line_rewritten_then_erased(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(progress, "SHOW_AFTER", 0.0)
    monkeypatch.setattr(progress, "EVERY", 0.0)
    shown = progress.Progress("acp-bridge sessions export", enabled=True)
    shown.add(1_500_000, "bytes")
    shown.add(1_000_000, "bytes")
    shown.done()
    err = capsys.readouterr().err
    assert err.startswith("\r\x1b[Kacp-bridge sessions export: 1.5 MB read (")
    assert "\r\x1b[Kacp-bridge sessions export: 2.5 MB read (" in err
    assert err.endswith("\r\x1b[K")  # erased: the terminal is left as it was
    quiet = progress.Progress("x", enabled=False)
    quiet.set(10, "records")
    quiet.done()
    assert capsys.readouterr().err == ""


@pytest.mark.integration
def test_progress_only_for_output_to_a_file_with_stderr_at_a_terminal(tmp_path: Path) -> None:
    import pty

    code = ("import sys; from acp_bridge.cli.sessions.progress import Progress; "
            "open(sys.argv[1], 'w').write(str(Progress('x').enabled))")
    result = tmp_path / "enabled"
    main, tty = pty.openpty()
    seen = []
    try:
        with open(tmp_path / "out", "wb") as file:
            for stdout, stderr in ((file, tty), (tty, tty), (file, subprocess.PIPE)):
                subprocess.run([sys.executable, "-c", code, str(result)], stdout=stdout, stderr=stderr,
                               timeout=30, check=True)
                seen.append(result.read_text())
    finally:
        os.close(main)
        os.close(tty)
    # Output to a file, stderr at a terminal: progress. The transcript on the terminal
    # itself, or no terminal to draw on: none.
    assert seen == ["True", "False", "False"]


@given(st.lists(st.sampled_from(["a", "é", " ", "\t", "\n", "\r", "\r\n", "\x1b", "\x0b", "\x85", "\xa0", "  \n"]),
                max_size=30).map("".join),
       st.sampled_from(["", "      | ", "> "]), st.sampled_from([1, 2, 5, 1 << 16]))
def test_long_text_is_printed_as_the_whole_text_would_be(text: str, pad: str, piece: int) -> None:
    """`Lines` (a piece at a time, long lines in slices) prints what indenting the
    cleaned, stripped text line by line prints."""
    from acp_bridge.cli.safe_text import clean
    from acp_bridge.cli.sessions import text as text_module

    stripped = text.strip()
    old = text_module.PIECE
    text_module.PIECE = piece
    try:
        lines = text_module.Lines(text, pad, strip=True)
        rstripped = text_module.Lines(text, pad, strip=True, rstrip=True)
        assert bool(lines) == bool(stripped)
        if stripped:
            split = clean(stripped).split("\n")
            assert "".join(lines.pieces()) == "".join(f"{x}\n" for x in text_module.indent(split, pad))
            assert "".join(rstripped.pieces()) == "".join(f"{pad}{x}".rstrip() + "\n" for x in split)
    finally:
        text_module.PIECE = old


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_a_long_streamed_step_cut_short_is_shown_from_its_spool(tmp_path: Path, backend: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Streamed text past the spool's memory goes to a temporary file: a step cut short
    (no message) shows it all, and the file is closed (no ResourceWarning)."""
    from acp_bridge.cli.sessions import turns
    from tests.test_sessions_cli import cli

    monkeypatch.setattr(turns, "SPOOL", 64)
    store = SessionStore(open_backend(backend, tmp_path))
    log = store.create(cwd="/w")
    script = Script().text_turn("q1", "done before").start_turn("q2").start_step()
    words = [f"word{i:04d} " for i in range(2_000)]
    for word in words:
        script.chunk(word)
    log.extend(script.items)  # the agent dies here: turn 2 never ends
    log.close()
    store.close()
    for command in (["show", log.id], ["export", log.id]):
        res = cli("--store", str(tmp_path), "--backend", backend, *command)
        assert res.code == 0, res.err
        assert "".join(words).strip() in res.out
        assert "partial" in res.out and "not yet repaired on disk" in res.out
