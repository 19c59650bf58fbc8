"""A slash command that cannot run (issue 35, point 5: `/mode nope`, `/title` without a
title, `/export ../x.md`) is answered with what was wrong and recorded as a command turn
that ended so (`turn/end error {code: "command_failed"}` after a `turn/start` whose
trigger is the command), never as a failed model turn: settled `end_turn`, its end
notice says the command could not run, `sessions show` and the exports say so, and
`stats` counts it apart (`failedCommands`, not `errors`). Over our agent and the wrapper
the answers are tested in tests/test_slash_commands.py and tests/test_wrap_commands.py."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_bridge.host.settlement import TurnFailed, settle
from acp_bridge.host.updates import end_notice
from session.events import Event, Reason, reason
from tests.support.logs import Script
from tests.support.search_store import add_session
from tests.test_sessions_cli import cli

WRONG = "unknown mode 'nope': use one of ask, accept_edits, read_only"


def failed_command_turn(s: Script, typed: str, message: str) -> Script:
    s.turn += 1
    s.add("turn/start", {"turn": s.turn, "trigger": {"kind": "command", "name": typed.split()[0][1:]},
                         "mode": "ask"})
    s.add("user/message", {"turn": s.turn, "content": [{"type": "text", "text": typed}]})
    return s.end_turn("error", step=0, message=message, code="command_failed", retryable=False)


def ended(why: Reason) -> Event:
    return {"seq": 9, "time": 1, "type": "turn/end", "data": {"turn": 2, "reason": why}}


def test_it_is_answered_not_failed() -> None:
    wrong = reason("error", step=0, message=WRONG, code="command_failed", retryable=False)
    answer = settle(ended(wrong))
    assert not isinstance(answer, TurnFailed)
    assert answer["stopReason"] == "end_turn"
    assert answer["_meta"]["acpBridge"]["reason"]["code"] == "command_failed"
    notice = end_notice(wrong)
    assert notice is not None and notice.strip() == f"[The command could not run: {WRONG}.]"
    # A model's failed turn is still one.
    model = reason("error", step=1, message="rate limited", code="rate_limit")
    assert isinstance(settle(ended(model)), TurnFailed)
    assert "This turn failed: rate limited." in (end_notice(model) or "")


@pytest.fixture
def stored(tmp_path: Path) -> str:
    s = Script().text_turn("hello", "hi")
    failed_command_turn(s, "/mode nope", WRONG)
    failed_command_turn(s, "/title", "/title needs the new title: /title NEW TITLE")
    failed_command_turn(s, "/export ../x.md", "/export takes a file name in the session's folder, not '../x.md'")
    s.start_turn("and then").start_step().message("fine").end_step().end_turn("error", step=1, message="rate limited",
                                                                              code="rate_limit", retryable=True)
    return add_session(tmp_path / "store", "jsonl", str(tmp_path), s, 1_767_000_000_000)


def test_transcripts_say_the_command_could_not_run(tmp_path: Path, stored: str) -> None:
    root = str(tmp_path / "store")
    for args in (("show", stored), ("show", stored, "--full"), ("export", stored, "--format", "md"),
                 ("export", stored, "--format", "html")):
        result = cli("--store", root, *args)
        assert result.code == 0, result.err
        text = html.unescape(result.out) if "html" in args else result.out
        assert f"the command could not run: {WRONG}" in text, args
        assert "the command could not run: /title needs the new title" in text, args
        assert "the command could not run: /export takes a file name in the session's folder, not '../x.md'" \
            in text, args
        assert "error: unknown mode" not in text and "error: rate limited" in text, args


def test_stats_count_them_apart(tmp_path: Path, stored: str) -> None:
    result = cli("--store", str(tmp_path / "store"), "stats", "--by", "none", "--json")
    total: dict[str, Any] = orjson.loads(result.raw)["total"]
    assert (total["turns"], total["errors"], total["commands"], total["failedCommands"]) == (2, 1, 3, 3)
