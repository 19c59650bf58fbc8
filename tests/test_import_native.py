"""The import core (acp_bridge.cli.importer.native, pure): what a reader tells the
`Builder` and the turns it makes, in tables: one turn per prompt, one step per message
key with its usage once, calls answered in their step (a missing result closed
`missing`, an orphan result kept raw), and where a record kept raw goes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from acp_bridge.cli.importer.native import MISSING_RESULT, Builder
from acp_bridge.cli.importer.records import ms, tool_kind, tool_title
from acp_bridge.cli.importer.store import without_tail
from session.invariants import check_invariants

Script = Callable[[Builder], None]


def events(script: Script) -> list[tuple[str, dict[str, Any]]]:
    builder = Builder("test-agent")
    script(builder)
    session = builder.finish()
    out: list[tuple[str, dict[str, Any]]] = [(kind, dict(data)) for turn in session.turns
                                             for _, (kind, data) in turn.items]
    stamped: list[Any] = [{"type": k, "seq": i, "time": 0, "data": d} for i, (k, d) in enumerate(out)]
    check_invariants(stamped, closed=True)
    return out


def shape(script: Script) -> list[str]:
    return [kind for kind, _ in events(script)]


def one_step_two_records(b: Builder) -> None:
    b.prompt(1, [{"type": "text", "text": "hi"}])
    b.step(2, key="m1", model="m", native={"r": 1})
    b.text("reasoning", "think")
    b.usage({"inputTokens": 10, "outputTokens": 1})
    b.step(3, key="m1", native={"r": 2})  # the same message, written again
    b.text("text", "hello")
    b.usage({"inputTokens": 10, "outputTokens": 5})  # its usage again: counted once


def a_call_without_result(b: Builder) -> None:
    b.prompt(1, [{"type": "text", "text": "run"}])
    b.step(2, key="m1")
    b.call("c1", "bash", {"command": "ls"})


def an_answer_before_any_prompt(b: Builder) -> None:
    b.step(5, key="m0")
    b.text("text", "unprompted")


@pytest.mark.parametrize("script,expected", [
    (one_step_two_records, ["turn/start", "user/message", "step/start", "assistant/chunk", "assistant/chunk",
                            "assistant/message", "step/end", "turn/end"]),
    (a_call_without_result, ["turn/start", "user/message", "step/start", "assistant/message", "tool/call",
                             "tool/result", "step/end", "turn/end"]),
    (an_answer_before_any_prompt, ["turn/start", "user/message", "step/start", "assistant/chunk",
                                   "assistant/message", "step/end", "turn/end"]),
])
def test_the_shapes_the_builder_makes(script: Script, expected: list[str]) -> None:
    assert shape(script) == expected


def test_a_message_in_several_records_is_one_step_its_usage_once() -> None:
    made = dict(events(one_step_two_records))
    message = made["assistant/message"]
    assert message["usage"] == {"inputTokens": 10, "outputTokens": 5}
    assert message["content"] == [{"type": "reasoning", "text": "think"}, {"type": "text", "text": "hello"}]
    assert message["native"] == [{"r": 1}, {"r": 2}]
    assert made["turn/start"]["model"] == "m" and made["turn/start"]["trigger"] == {"kind": "prompt",
                                                                                     "imported": "test-agent"}


def test_a_call_without_its_result_is_closed_missing() -> None:
    result = dict(events(a_call_without_result))["tool/result"]
    assert result["isError"] and result["error"] == {"name": "bash", "code": MISSING_RESULT}


def test_results_go_to_their_call_and_an_orphan_is_kept() -> None:
    def script(b: Builder) -> None:
        b.prompt(1, [{"type": "text", "text": "two calls"}])
        b.step(2, key="m1")
        b.call("a", "read_file", {"path": "x"})
        b.call("b", "bash", {"command": "ls"})
        b.result(4, "b", [{"type": "text", "text": "B"}], is_error=False)
        b.result(5, "a", [{"type": "text", "text": "A"}], is_error=True)
        b.result(6, "zzz", [], is_error=False, native={"lost": True})
        b.step(7, key="m2")
        b.text("text", "done")

    made = events(script)
    results = {d["callId"]: (d["content"][0]["text"], d["isError"]) for k, d in made if k == "tool/result"}
    assert results == {"a": ("A", True), "b": ("B", False)}
    assert [d["step"] for k, d in made if k == "tool/result"] == [1, 1]
    start = made[0][1]
    assert start["native"] == [{"orphanResult": "zzz", "record": {"lost": True}}]


def test_where_a_record_kept_raw_goes() -> None:
    def script(b: Builder) -> None:
        b.keep("before the first prompt")
        b.prompt(1, [{"type": "text", "text": "one"}], native="prompt one")
        b.step(2, key="m1")
        b.keep("inside turn one")
        b.text("text", "answer one")
        b.keep("between the turns")
        b.prompt(3, [{"type": "text", "text": "two"}])
        b.step(4, key="m2")
        b.text("text", "answer two")
        b.keep("after the last turn")

    made = events(script)
    starts = [d.get("native") for k, d in made if k == "turn/start"]
    ends = [d.get("native") for k, d in made if k == "turn/end"]
    assert starts == [["before the first prompt", "prompt one", "inside turn one"], ["between the turns"]]
    assert ends == [None, ["after the last turn"]]


def test_an_append_does_not_keep_again_what_the_stored_turn_end_keeps() -> None:
    builder = Builder("a")
    builder.prompt(1, [{"type": "text", "text": "one"}])
    builder.keep("after one")
    builder.keep("more")
    builder.prompt(2, [{"type": "text", "text": "two"}], native="prompt two")
    turns = builder.finish().turns
    (second,) = without_tail(turns[1:], ["after one", "more"])
    assert second.items[0][1][1]["native"] == ["prompt two"]
    assert without_tail(turns[1:], ["something else"]) == turns[1:]


@pytest.mark.parametrize("value,expected", [
    ("2026-12-05T03:21:40.469Z", 1796440900469), ("2026-12-05T03:21:40+00:00", 1796440900000),
    (1796440900, 1796440900000), (1796440900469, 1796440900469), ("2026-12-05T03:21:40", None),
    ("yesterday", None), (None, None), (True, None)])
def test_native_times(value: Any, expected: int | None) -> None:
    assert ms(value) == expected


@pytest.mark.parametrize("name,arguments,kind,title", [
    ("Bash", {"command": "ls -la\nsecond"}, "execute", "Bash: ls -la"),
    ("run_shell_command", {"command": "cat x", "description": "show x"}, "execute", "run_shell_command: show x"),
    ("Read", {"file_path": "/a/b"}, "read", "Read: /a/b"),
    ("apply_patch", "*** Begin Patch", "edit", "apply_patch"),
    ("Grep", {"pattern": "TODO"}, "search", "Grep: TODO"),
    ("shell", {"command": ["bash", "-lc", "ls"]}, "execute", "shell: bash -lc ls"),
    ("mystery", {}, "other", "mystery")])
def test_a_tool_s_kind_and_title(name: str, arguments: Any, kind: str, title: str) -> None:
    assert (tool_kind(name), tool_title(name, arguments)) == (kind, title)
