"""`derive_messages` as a table: a log in, the exact provider transcript out."""

from __future__ import annotations

from typing import Any

import pytest

from session import derive_messages
from session.transcript import Transcript, history_budget, unanswered_calls
from tests.support.logs import Script, closers_of, events_of


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def call_block(call_id: str) -> dict[str, Any]:
    return {"type": "tool-call", "id": call_id, "name": "read_file",
            "arguments": f'{{"path":"{call_id}.txt"}}'}


def tool(call_id: str, text: str = "contents", error: bool = False) -> dict[str, Any]:
    return {"role": "tool", "callId": call_id, "name": "read_file",
            "content": [{"type": "text", "text": text}], "isError": error}


CASES: list[tuple[str, Script, list[dict[str, Any]]]] = [
    ("empty", Script(), []),
    ("text turn: chunks and boundaries skipped", Script().text_turn("hi", "hello back"),
     [user("hi"), {"role": "assistant", "content": [{"type": "text", "text": "hello back"}]}]),
    ("usage-only message skipped",
     Script().start_turn("q").start_step().message("", usage=True).end_step().end_turn("max_tokens"),
     [user("q")]),
    ("tool calls and results in order, tool/call skipped",
     Script().start_turn("read").start_step().message("reading", calls=("a", "b"))
     .call("a").result("a", "A").call("b").result("b", "B", error=True).end_step()
     .start_step().message("done").end_step().end_turn(),
     [user("read"),
      {"role": "assistant", "content": [{"type": "text", "text": "reading"}, call_block("a"), call_block("b")]},
      tool("a", "A"), tool("b", "B", error=True),
      {"role": "assistant", "content": [{"type": "text", "text": "done"}]}]),
    ("two turns",
     Script().text_turn("one", "uno").text_turn("two", "dos"),
     [user("one"), {"role": "assistant", "content": [{"type": "text", "text": "uno"}]},
      user("two"), {"role": "assistant", "content": [{"type": "text", "text": "dos"}]}]),
]


@pytest.mark.parametrize(("name", "script", "expected"), CASES, ids=[c[0] for c in CASES])
def test_derive_messages(name: str, script: Script, expected: list[dict[str, Any]]) -> None:
    assert derive_messages(events_of(script)) == expected


def test_prompt_blocks_are_kept_verbatim() -> None:
    blocks = [{"type": "text", "text": "see"},
              {"type": "resource_link", "uri": "file:///a.py", "name": "a.py"},
              {"type": "resource", "resource": {"uri": "file:///b.py", "text": "x = 1"}}]
    script = Script().add("turn/start", {"turn": 1, "trigger": {"kind": "prompt"}})
    script.add("user/message", {"turn": 1, "content": blocks})
    assert derive_messages(events_of(script)) == [{"role": "user", "content": blocks}]


def test_interrupted_calls_are_answered_after_repair() -> None:
    events = events_of(Script().start_turn("go").start_step().message("m", calls=("a", "b")).call("a"))
    assert unanswered_calls(derive_messages(events)) == ["a", "b"]
    repaired = events + closers_of(events)
    messages = derive_messages(repaired)
    assert unanswered_calls(messages) == []
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert all(m["isError"] for m in messages if m["role"] == "tool")


def _tool_turn(script: Script, n: int, size: int) -> Script:
    call = f"c{n}"
    return (script.start_turn(f"turn {n}").start_step().message("reading", calls=(call,))
            .call(call).result(call, "x" * size).end_step()
            .start_step().message(f"done {n}").end_step().end_turn())


@pytest.mark.parametrize(("budget", "kept_turns"), [
    (None, 10),  # no budget: everything, as derive_messages
    (10 ** 9, 10),  # a budget never reached
    (3_500, 3),  # about 1 KB per turn: the last three fit
    (500, 1),  # smaller than one turn: the last turn still stays
])
def test_budget_drops_oldest_whole_turns(budget: int | None, kept_turns: int) -> None:
    script = Script()
    for n in range(10):
        _tool_turn(script, n, 1000)
    events = events_of(script)
    transcript = Transcript(budget=budget)
    transcript.feed_all(events)
    full = derive_messages(events)
    per_turn = len(full) // 10
    assert transcript.messages == full[len(full) - kept_turns * per_turn:]
    assert transcript.dropped == len(full) - kept_turns * per_turn
    assert transcript.messages[0]["role"] == "user"
    assert unanswered_calls(transcript.messages) == []


def test_history_budget_follows_the_context_window() -> None:
    assert history_budget(100_000) == 800_000
    assert history_budget(None) == history_budget(0) > 0
