"""`derive_messages` as a table: a log in, the exact provider transcript out."""

from __future__ import annotations

from typing import Any

import pytest

from session import derive_messages, interrupted_turn_closers
from session.transcript import unanswered_calls
from tests.logs import Script, events_of


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
    repaired = events + interrupted_turn_closers(events)
    messages = derive_messages(repaired)
    assert unanswered_calls(messages) == []
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert all(m["isError"] for m in messages if m["role"] == "tool")
