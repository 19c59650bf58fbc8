"""The chat's prompt history file (`STORE/chat_history`) is capped: when a chat starts
the file keeps the newest prompts within HISTORY_ENTRIES and HISTORY_BYTES, in the
format prompt_toolkit reads back, with mode 0600 (docs/chat.md, "History")."""

from __future__ import annotations

from pathlib import Path

from prompt_toolkit.history import FileHistory

from acp_bridge.cli.chat.editor import (
    HISTORY_BYTES,
    HISTORY_ENTRIES,
    HISTORY_FILE,
    history_for,
    trim_history,
)


def written(store: Path, prompts: list[str]) -> Path:
    """A history file written by prompt_toolkit itself, as chats over time write it."""
    path = store / HISTORY_FILE
    history = FileHistory(str(path))
    for prompt in prompts:
        history.store_string(prompt)
    path.chmod(0o600)
    return path


def read_back(path: Path) -> list[str]:
    return list(reversed(list(FileHistory(str(path)).load_history_strings())))  # oldest first


def test_a_chat_start_keeps_the_newest_entries(tmp_path: Path) -> None:
    prompts = [f"prompt {i}" + ("\nsecond line" if i % 7 == 0 else "") for i in range(HISTORY_ENTRIES + 300)]
    path = written(tmp_path, prompts)
    history_for(tmp_path)  # what the chat does when its editor is made
    assert read_back(path) == prompts[-HISTORY_ENTRIES:]
    assert path.stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / (HISTORY_FILE + ".trim")).exists()


def test_the_file_stays_under_the_byte_limit_with_the_newest_prompts(tmp_path: Path) -> None:
    big = [f"{i:04d}" + "x" * 9_996 for i in range(150)]  # 1.5 MB of long pastes
    path = written(tmp_path, big)
    assert path.stat().st_size > HISTORY_BYTES
    history_for(tmp_path)
    kept = read_back(path)
    assert path.stat().st_size <= HISTORY_BYTES
    assert kept == big[-len(kept):] and len(kept) >= 90


def test_a_history_within_the_limits_is_left_as_it_is(tmp_path: Path) -> None:
    path = written(tmp_path, ["one", "two\nlines", "three"])
    before = path.read_bytes(), path.stat().st_mtime_ns
    trim_history(path)
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    trim_history(tmp_path / "absent")  # no file yet: nothing to do


def test_small_limits_and_a_stray_line(tmp_path: Path) -> None:
    path = written(tmp_path, ["a", "b", "c", "d"])
    path.write_bytes(path.read_bytes() + b"\n# 2026-01-01 00:00:00\n")  # a time with no prompt
    trim_history(path, entries=2)
    assert read_back(path) == ["c", "d"]
    history = history_for(tmp_path)
    history.store_string("e")  # the trimmed file is appended to as before
    assert read_back(path) == ["c", "d", "e"]
