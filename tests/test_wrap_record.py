"""`TurnRecorder` (acp_bridge/wrap/record.py): a wrapped agent's ACP traffic of one turn
in, session-log items out. Realistic turns as a table, each appended through a real
`SessionLog` (memory backend: the log checks the invariants at every append) and loaded
back; then the edge cases one by one. tests/test_wrap_replay.py holds the property over
random update streams and the replay."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_bridge.errors import TurnFailedError
from acp_bridge.host.engine import TurnEnd
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.host.prompts import answer_of
from acp_bridge.rpc.protocol import error_object
from acp_bridge.wrap.record import TurnRecorder
from session import SessionStore, check_invariants
from session.backends.memory import MemoryBackend
from session.items import Item, step_end, step_start, wrapped_update
from tests.support.acp_schema import validate_def
from tests.support.acp_updates import (
    ALLOW,
    MODE,
    PLAN,
    PROMPT,
    REJECT,
    asked,
    call,
    done,
    logged,
    shown,
    text,
    thought,
)
from tests.support.logs import write
from tests.support.strategies import json_values

Op = tuple[Any, ...]


def record(ops: list[Op], turn: int = 1) -> list[Item]:
    """The items for `ops` (("update", u), ("permission", tool_call, outcome), ("answer",
    result), ("failed", error), ("cancelled", by)) after the prompt."""
    recorder = TurnRecorder(turn, agent="wrap:test-agent")
    items = recorder.prompt(PROMPT)
    for name, *args in ops:
        items += getattr(recorder, name)(*args)
    return items



def start() -> list[Item]:
    return [("turn/start", {"turn": 1, "trigger": {"kind": "prompt"}, "model": "wrap:test-agent"}),
            ("user/message", {"turn": 1, "content": PROMPT})]


def chunk(t: str, step: int = 1, kind: str = "text") -> Item:
    return ("assistant/chunk", {"turn": 1, "step": step, "chunk": {"type": kind, "text": t}})


def message(step: int, *content: dict[str, Any], **more: Any) -> Item:
    return ("assistant/message", {"turn": 1, "step": step, "content": list(content), **more})


def block(cid: str, name: str = "Read a.txt") -> dict[str, Any]:
    return {"type": "tool-call", "id": cid, "name": name, "arguments": '{"path":"a.txt"}'}


def tool_call(cid: str, step: int = 1, **more: Any) -> Item:
    return ("tool/call", {"turn": 1, "step": step, "callId": cid, "name": "Read a.txt",
                          "arguments": {"path": "a.txt"}, "title": "Read a.txt", "kind": "read", **more,
                          "silent": True})


def result(cid: str, step: int = 1, output: str = "one\ntwo\n", error: bool = False,
           **more: Any) -> Item:
    return ("tool/result", {"turn": 1, "step": step, "callId": cid,
                            "content": [{"type": "text", "text": output}], "isError": error,
                            "display": shown(output), **more, "silent": True})


def wu(update: dict[str, Any]) -> Item:
    """What the editor was sent, kept as it came (in turn 1)."""
    return wrapped_update(update, 1)


def usage(**counts: int) -> Item:
    return message(1, usage=counts, silent=True)


def step(n: int, edge: Literal["start", "end"]) -> Item:
    return step_start(1, n) if edge == "start" else step_end(1, n)


def end(kind: str, **fields: Any) -> Item:
    return ("turn/end", {"turn": 1, "reason": {"kind": kind, **fields}})


T = {"type": "text", "text": ""}
ASKED_C7 = {**asked("c7"), "rawInput": {"path": "a.txt"}, "status": "pending", "content": shown("Allow reading a.txt?")}
END_TURN = ("answer", {"stopReason": "end_turn"})

def compacting(status: str, **more: Any) -> dict[str, Any]:
    """A `compaction_update` of the agent's (ACP v1.25)."""
    return {"sessionUpdate": "compaction_update", "compactionId": "cmp_1", "status": status, **more}


def summary_chunk(t: str) -> dict[str, Any]:
    return {"sessionUpdate": "compaction_summary_chunk", "compactionId": "cmp_1", "content": {**T, "text": t}}


def compaction(status: str, summary: list[Any], sent: dict[str, Any], step: int = 1, **more: Any) -> Item:
    """Its `context/compaction`: what it replaces (in turn 1: nothing), the compaction as
    it stands, the update as it came."""
    return ("context/compaction", {"turn": 1, "step": step, "compactionId": "cmp_1",
                                   "replaces": {"fromTurn": 1, "toTurn": 0}, "summary": summary, "status": status,
                                   **more, "sent": sent})


TABLE: list[tuple[str, list[Op], list[Item]]] = [
    ("text only", [("update", text("Hello ")), ("update", text("world")), END_TURN],
     [*start(), step(1, "start"), chunk("Hello "), chunk("world"),
      message(1, {**T, "text": "Hello world"}), step(1, "end"), end("completed")]),
    ("thoughts then text: one step",
     [("update", thought("Let me ")), ("update", thought("see.")), ("update", text("Done.")), END_TURN],
     [*start(), step(1, "start"), chunk("Let me ", kind="reasoning"), chunk("see.", kind="reasoning"),
      chunk("Done."), message(1, {"type": "reasoning", "text": "Let me see."}, {**T, "text": "Done."}),
      step(1, "end"), end("completed")]),
    ("text, a tool call granted, its result, more text: two steps; the call written before its permission"
     " reaches the editor, its result as the step closes",
     [("update", text("Reading.")), ("update", call("c1")), ("asking", asked("c1")),
      ("permission", asked("c1"), ALLOW), ("update", done("c1")), ("update", text("Fixed.")), END_TURN],
     [*start(), step(1, "start"), chunk("Reading."), wu(call("c1")),
      message(1, {**T, "text": "Reading."}, block("c1")), tool_call("c1"), wu(done("c1")),
      result("c1", permission=ALLOW), step(1, "end"),
      step(2, "start"), chunk("Fixed.", 2), message(2, {**T, "text": "Fixed."}), step(2, "end"),
      end("completed")]),
    ("a call without a permission: written as the step closes, as last announced",
     [("update", text("Reading.")), ("update", call("c1")), ("update", done("c1")), ("update", text("Fixed.")),
      END_TURN],
     [*start(), step(1, "start"), chunk("Reading."), wu(call("c1")), wu(done("c1")),
      message(1, {**T, "text": "Reading."}, block("c1")), tool_call("c1"), result("c1"), step(1, "end"),
      step(2, "start"), chunk("Fixed.", 2), message(2, {**T, "text": "Fixed."}), step(2, "end"),
      end("completed")]),
    ("any request of the agent (a file, a terminal) writes the step's calls first; what the step says"
     " after it is a message of its own, the calls announced after it are written at the close",
     [("update", text("Two.")), ("update", call("c1")), ("asking", None), ("asking", None),
      ("update", text(" Then")), ("update", call("c2")), ("update", done("c1")), ("update", done("c2")),
      END_TURN],
     [*start(), step(1, "start"), chunk("Two."), wu(call("c1")), message(1, {**T, "text": "Two."}, block("c1")),
      tool_call("c1"), chunk(" Then"), wu(call("c2")), wu(done("c1")), wu(done("c2")),
      message(1, {**T, "text": " Then"}, block("c2")), tool_call("c2"), result("c1"), result("c2"),
      step(1, "end"), end("completed")]),
    ("a call asked about is written as the request describes it, the agent's latest word (opencode announces "
     "`bash {cwd}`, then asks about the command): a later title and arguments reach only the replay",
     [("update", call("c1", title="bash", rawInput={"cwd": "/w"})),
      ("asking", {**asked("c1"), "title": "cat a.txt", "rawInput": {"command": "cat a.txt"}}),
      ("update", {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "title": "cat a.txt (ran)",
                  "rawInput": {"command": "cat a.txt", "cwd": "/w"}}),
      ("update", done("c1")), END_TURN],
     [*start(), step(1, "start"), wu(call("c1", title="bash", rawInput={"cwd": "/w"})),
      message(1, {"type": "tool-call", "id": "c1", "name": "cat a.txt", "arguments": '{"command":"cat a.txt"}'}),
      ("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "cat a.txt", "arguments": {"command": "cat a.txt"},
                     "title": "cat a.txt", "kind": "read", "silent": True}),
      wu({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "title": "cat a.txt (ran)",
          "rawInput": {"command": "cat a.txt", "cwd": "/w"}}),
      wu(done("c1")), result("c1"), step(1, "end"), end("completed")]),
    ("a call that names its tool (ACP ToolCall.name, v1.22): the tool's own name in the message and the"
     " tool/call, its title beside (issue 33); a later update's name too",
     [("update", call("c1", name="read")), ("update", {**done("c1"), "name": "read_text"}), END_TURN],
     [*start(), step(1, "start"), wu(call("c1", name="read")), wu({**done("c1"), "name": "read_text"}),
      message(1, block("c1", name="read_text")), tool_call("c1", name="read_text"), result("c1"),
      step(1, "end"), end("completed")]),
    ("a rejected permission: the failed result carries it",
     [("update", call("c1")), ("asking", asked("c1")), ("permission", asked("c1"), REJECT),
      ("update", done("c1", "The user rejected it.", "failed")), ("update", text("OK, not reading.")),
      END_TURN],
     [*start(), step(1, "start"), wu(call("c1")), message(1, block("c1")), tool_call("c1"),
      wu(done("c1", "The user rejected it.", "failed")),
      result("c1", output="The user rejected it.", error=True, permission=REJECT), step(1, "end"),
      step(2, "start"), chunk("OK, not reading.", 2), message(2, {**T, "text": "OK, not reading."}),
      step(2, "end"), end("completed")]),
    ("two tool calls in one step: text and calls in the order said",
     [("update", text("Two files.")), ("update", call("c1")), ("update", text(" And")),
      ("update", call("c2")), ("update", done("c2")), ("update", done("c1")),
      ("update", text("Both read.")), END_TURN],
     [*start(), step(1, "start"), chunk("Two files."), wu(call("c1")), chunk(" And"), wu(call("c2")),
      wu(done("c2")), wu(done("c1")),
      message(1, {**T, "text": "Two files."}, block("c1"), {**T, "text": " And"}, block("c2")),
      tool_call("c1"), tool_call("c2"), result("c1"), result("c2"), step(1, "end"),
      step(2, "start"), chunk("Both read.", 2), message(2, {**T, "text": "Both read."}), step(2, "end"),
      end("completed")]),
    ("plan and mode updates inside a turn: kept as they came, steps untouched",
     [("update", PLAN), ("update", text("Planning")), ("update", MODE), ("update", text(" done")),
      END_TURN],
     [*start(), wu(PLAN), step(1, "start"), chunk("Planning"), wu(MODE),
      chunk(" done"), message(1, {**T, "text": "Planning done"}), step(1, "end"), end("completed")]),
    ("an error answer: its data's code, its step",
     [("update", text("Hm")), ("failed", {"code": -32603, "message": "overloaded",
                                         "data": {"code": "rate_limit", "retryable": True}})],
     [*start(), step(1, "start"), chunk("Hm"), message(1, {**T, "text": "Hm"}), step(1, "end"),
      end("error", step=1, message="overloaded", code="rate_limit", retryable=True,
          agentError={"code": -32603, "message": "overloaded", "data": {"code": "rate_limit", "retryable": True}})]),
    ("an error before any step: step 0, the code's word",
     [("failed", {"code": -32000, "message": "log in first"})],
     [*start(), end("error", step=0, message="log in first", code="auth",
                    agentError={"code": -32000, "message": "log in first"})]),
    ("cancelled with a call open: the call is closed cancelled (silent: the agent left it so)",
     [("update", call("c1")), ("asking", asked("c1")), ("permission", asked("c1"), {"outcome": "cancelled"}),
      ("cancelled", "session/cancel")],
     [*start(), step(1, "start"), wu(call("c1")), message(1, block("c1")), tool_call("c1"),
      ("tool/result", {"turn": 1, "step": 1, "callId": "c1", "content": [
          {"type": "text", "text": "The tool call was cancelled before the agent reported its outcome."}],
          "isError": True, "error": {"name": "Cancelled", "code": "cancelled"},
          "permission": {"outcome": "cancelled"}, "silent": True}),
      step(1, "end"), end("cancelled", by="session/cancel")]),
    ("the agent answers cancelled", [("update", text("Wo")), ("answer", {"stopReason": "cancelled"})],
     [*start(), step(1, "start"), chunk("Wo"), message(1, {**T, "text": "Wo"}), step(1, "end"),
      end("cancelled", by="session/cancel")]),
    ("max_tokens", [("update", text("long")), ("answer", {"stopReason": "max_tokens"})],
     [*start(), step(1, "start"), chunk("long"), message(1, {**T, "text": "long"}), step(1, "end"),
      end("max_tokens")]),
    ("max_turn_requests: max_steps naming no limit", [("answer", {"stopReason": "max_turn_requests"})],
     [*start(), end("max_steps", limit=None)]),
    ("refusal", [("answer", {"stopReason": "refusal"})], [*start(), end("refusal")]),
    ("an unknown stopReason is an error, not a success",
     [("update", text("x")), ("answer", {"stopReason": "bored"})],
     [*start(), step(1, "start"), chunk("x"), message(1, {**T, "text": "x"}), step(1, "end"),
      end("error", step=1, code="invalid_answer",
          message="the wrapped agent answered an unknown stopReason 'bored'")]),
    ("the answer's usage is the turn's (opencode sends it there)",
     [("update", text("hi")), ("answer", {"stopReason": "end_turn", "usage": {
         "inputTokens": 120, "outputTokens": 9, "totalTokens": 129, "cachedReadTokens": 4, "thoughtTokens": 2}})],
     [*start(), step(1, "start"), chunk("hi"), message(1, {**T, "text": "hi"}),
      usage(inputTokens=120, outputTokens=9, cacheReadTokens=4, reasoningTokens=2), step(1, "end"),
      end("completed")]),
    ("gemini-cli's count in its answer's _meta.quota, when it has no usage",
     [("update", text("hi")), ("answer", {"stopReason": "end_turn", "_meta": {"quota": {
         "token_count": {"input_tokens": 240, "output_tokens": 30},
         "model_usage": [{"model": "m", "token_count": {"input_tokens": 240, "output_tokens": 30}}]}}})],
     [*start(), step(1, "start"), chunk("hi"), message(1, {**T, "text": "hi"}),
      usage(inputTokens=240, outputTokens=30), step(1, "end"), end("completed")]),
    ("usage an answer holds even when the turn said nothing: a step hosts it",
     [("answer", {"stopReason": "end_turn", "usage": {"inputTokens": 5, "outputTokens": 0}})],
     [*start(), step(1, "start"), usage(inputTokens=5, outputTokens=0), step(1, "end"), end("completed")]),
    ("usage in chunks' _meta (qwen-code): summed; the chunks keep what they carried",
     [("update", text("a")), ("update", {**text(""), "_meta": {"usage": {"inputTokens": 10, "outputTokens": 2}}}),
      ("update", {**text(""), "_meta": {"usage": {"inputTokens": 30, "outputTokens": 5}}}), END_TURN],
     [*start(), step(1, "start"), chunk("a"),
      ("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text", "text": ""},
                           "sent": {"_meta": {"usage": {"inputTokens": 10, "outputTokens": 2}}}}),
      ("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text", "text": ""},
                           "sent": {"_meta": {"usage": {"inputTokens": 30, "outputTokens": 5}}}}),
      message(1, {**T, "text": "a"}), usage(inputTokens=40, outputTokens=7), step(1, "end"), end("completed")]),
    ("usage_update: kept as it came, not a usage of the turn (how full the context is, not what the turn cost)",
     [("update", {"sessionUpdate": "usage_update", "used": 10, "size": 1000}),
      ("update", text("a")), ("update", {"sessionUpdate": "usage_update", "used": 50, "size": 1000}),
      ("update", text("b")), ("update", {"sessionUpdate": "usage_update", "used": 70}), END_TURN],
     [*start(), wu({"sessionUpdate": "usage_update", "used": 10, "size": 1000}),
      step(1, "start"), chunk("a"), wu({"sessionUpdate": "usage_update", "used": 50, "size": 1000}), chunk("b"),
      wu({"sessionUpdate": "usage_update", "used": 70}), message(1, {**T, "text": "ab"}),
      step(1, "end"), end("completed")]),
    ("a chunk's messageId and _meta are kept (sent)",
     [("update", {**text("x"), "messageId": "m1"}), END_TURN],
     [*start(), step(1, "start"),
      ("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text", "text": "x"}, "sent": {"messageId": "m1"}}),
      message(1, {**T, "text": "x"}), step(1, "end"), end("completed")]),
    ("a call never finished is closed failed at the turn's end, not as a crash",
     [("update", call("c1")), ("asking", asked("c1")), ("permission", asked("c1"), ALLOW), END_TURN],
     [*start(), step(1, "start"), wu(call("c1")), message(1, block("c1")), tool_call("c1"),
      ("tool/result", {"turn": 1, "step": 1, "callId": "c1", "content": [
          {"type": "text", "text": "The agent ended the turn without reporting this tool call's outcome."}],
          "isError": True, "error": {"name": "Unfinished", "code": "unfinished"}, "permission": ALLOW,
          "silent": True}),
      step(1, "end"), end("completed")]),
    ("a call announced done at once",
     [("update", call("c1", status="completed", content=shown("hi"), rawOutput={"n": 1})), END_TURN],
     [*start(), step(1, "start"), wu(call("c1", status="completed", content=shown("hi"), rawOutput={"n": 1})),
      message(1, block("c1")), tool_call("c1"), result("c1", output="hi"), step(1, "end"), end("completed")]),
    ("interim updates: the result shows the latest content",
     [("update", call("c1", content=shown("0%"))),
      ("update", {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "in_progress",
                  "content": shown("50%")}),
      ("update", {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed",
                  "rawOutput": "done"}), END_TURN],
     [*start(), step(1, "start"), wu(call("c1", content=shown("0%"))),
      wu({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "in_progress",
          "content": shown("50%")}),
      wu({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed", "rawOutput": "done"}),
      message(1, block("c1")), tool_call("c1"), result("c1", output="50%"), step(1, "end"), end("completed")]),
    ("arguments and title as last announced (opencode, qwen-code)",
     [("update", call("c1", title="bash", kind="execute", rawInput={"cwd": "/w"})),
      ("update", {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "in_progress",
                  "title": "cat notes.txt", "rawInput": {"command": "cat notes.txt", "cwd": "/w"}}),
      ("update", done("c1")), END_TURN],
     [*start(), step(1, "start"), wu(call("c1", title="bash", kind="execute", rawInput={"cwd": "/w"})),
      wu({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "in_progress",
          "title": "cat notes.txt", "rawInput": {"command": "cat notes.txt", "cwd": "/w"}}),
      wu(done("c1")),
      message(1, {"type": "tool-call", "id": "c1", "name": "cat notes.txt",
                  "arguments": '{"command":"cat notes.txt","cwd":"/w"}'}),
      ("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "cat notes.txt",
                     "arguments": {"command": "cat notes.txt", "cwd": "/w"}, "title": "cat notes.txt",
                     "kind": "execute", "silent": True}),
      result("c1"), step(1, "end"), end("completed")]),
    ("the output that comes after the final status is the result (codex-acp)",
     [("update", call("c1")), ("update", done("c1", "Proposed Amendment: touch made.txt")),
      ("update", {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "content": shown("made\n")}),
      ("update", text("Done.")), END_TURN],
     [*start(), step(1, "start"), wu(call("c1")), wu(done("c1", "Proposed Amendment: touch made.txt")),
      wu({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "content": shown("made\n")}),
      message(1, block("c1")), tool_call("c1"), result("c1", output="made\n"), step(1, "end"),
      step(2, "start"), chunk("Done.", 2), message(2, {**T, "text": "Done."}), step(2, "end"), end("completed")]),
    ("unknown call ids, repeated announcements, late updates: kept as they came",
     [("update", done("ghost")), ("update", call("c1")), ("update", call("c1", title="Read a.txt again")),
      ("update", call("c1", status="failed")), ("update", done("c1")), END_TURN],
     [*start(), wu(done("ghost")), step(1, "start"), wu(call("c1")), wu(call("c1", title="Read a.txt again")),
      wu(call("c1", status="failed")), wu(done("c1")), message(1, block("c1")), tool_call("c1"), result("c1"),
      step(1, "end"), end("completed")]),
    ("a permission for a call never announced (qwen-code): the call is known, and written, from the"
     " request; its question is not its result",
     [("asking", ASKED_C7), ("permission", ASKED_C7, ALLOW),
      ("update", {"sessionUpdate": "tool_call_update", "toolCallId": "c7", "status": "completed"}), END_TURN],
     [*start(), step(1, "start"), message(1, block("c7")), tool_call("c7"),
      wu({"sessionUpdate": "tool_call_update", "toolCallId": "c7", "status": "completed"}),
      ("tool/result", {"turn": 1, "step": 1, "callId": "c7", "content": [], "isError": False,
                       "permission": ALLOW, "silent": True}),
      step(1, "end"), end("completed")]),
    ("a compaction: each update recorded as the compaction as it stands, its summary chunks kept as they came"
     " and counted into its summary",
     [("update", compacting("in_progress")), ("update", summary_chunk("Kept: ")),
      ("update", summary_chunk("the plan.")), ("update", compacting("completed", _meta={"ms": 9})),
      ("update", text("Done.")), END_TURN],
     [*start(), step(1, "start"), compaction("in_progress", [], compacting("in_progress")),
      wu(summary_chunk("Kept: ")), wu(summary_chunk("the plan.")),
      compaction("completed", [{**T, "text": "Kept: "}, {**T, "text": "the plan."}],
                 compacting("completed", _meta={"ms": 9})),
      chunk("Done."), message(1, {**T, "text": "Done."}), step(1, "end"), end("completed")]),
    ("a compaction's patches: a summary replaces, null clears, an error is kept until cleared",
     [("update", compacting("in_progress", summary=[{**T, "text": "draft"}])),
      ("update", compacting("in_progress", summary=None, error="slow")),
      ("update", compacting("failed")), END_TURN],
     [*start(), step(1, "start"),
      compaction("in_progress", [{**T, "text": "draft"}], compacting("in_progress", summary=[{**T, "text": "draft"}])),
      compaction("in_progress", [], compacting("in_progress", summary=None, error="slow"), error="slow"),
      compaction("failed", [], compacting("failed"), error="slow"), step(1, "end"), end("completed")]),
    ("a compaction after the calls' results is the next model call: a step of its own",
     [("update", call("c1")), ("update", done("c1")), ("update", compacting("completed")),
      ("update", text("On.")), END_TURN],
     [*start(), step(1, "start"), wu(call("c1")), wu(done("c1")), message(1, block("c1")), tool_call("c1"),
      result("c1"), step(1, "end"), step(2, "start"), compaction("completed", [], compacting("completed"), 2),
      chunk("On.", 2), message(2, {**T, "text": "On."}), step(2, "end"), end("completed")]),
    ("a compaction the agent left in progress: ended failed by the wrapper, silently (the editor saw it as it"
     " was), and its step stays open until then",
     [("update", call("c1")), ("update", done("c1")), ("update", compacting("in_progress")),
      ("update", text("On.")), END_TURN],
     [*start(), step(1, "start"), wu(call("c1")), wu(done("c1")), message(1, block("c1")), tool_call("c1"),
      result("c1"), step(1, "end"), step(2, "start"), compaction("in_progress", [], compacting("in_progress"), 2),
      chunk("On.", 2), message(2, {**T, "text": "On."}),
      ("context/compaction", {"turn": 1, "step": 2, "compactionId": "cmp_1", "replaces": {"fromTurn": 1, "toTurn": 0},
                              "summary": [], "status": "failed",
                              "error": "The agent ended the turn without finishing the compaction.", "silent": True}),
      step(2, "end"), end("completed")]),
    ("a compaction update without an id or a status describes none: kept as it came",
     [("update", {"sessionUpdate": "compaction_update", "status": "completed"}), END_TURN],
     [*start(), wu({"sessionUpdate": "compaction_update", "status": "completed"}), end("completed")]),
    ("a notice is kept as it came (the transcript's; never replayed)",
     [("update", {"sessionUpdate": "notice", "severity": "warning", "title": "MCP server unavailable"}), END_TURN],
     [*start(), wu({"sessionUpdate": "notice", "severity": "warning", "title": "MCP server unavailable"}),
      end("completed")]),
    ("a non-text chunk has no chunk event: kept as it came",
     [("update", {"sessionUpdate": "agent_message_chunk",
                  "content": {"type": "image", "data": "00", "mimeType": "image/png"}}), END_TURN],
     [*start(), wu({"sessionUpdate": "agent_message_chunk",
                    "content": {"type": "image", "data": "00", "mimeType": "image/png"}}),
      end("completed")]),
]


@pytest.mark.parametrize(("name", "ops", "expected"), TABLE, ids=[t[0] for t in TABLE])
def test_turns(name: str, ops: list[Op], expected: list[Item]) -> None:
    items = record(ops)
    assert items == expected
    logged(items)


def test_open_and_the_order_of_calls() -> None:
    recorder = TurnRecorder(3, agent="a", mode="ask")
    assert not recorder.open
    with pytest.raises(RuntimeError, match="before it was prompted"):
        recorder.answer({"stopReason": "end_turn"})
    # Before the prompt an update stands between turns.
    assert recorder.update(PLAN) == [("wrapped/update", {"update": PLAN})]
    items = recorder.prompt(PROMPT)
    assert items[0] == ("turn/start", {"turn": 3, "trigger": {"kind": "prompt"}, "mode": "ask", "model": "a"})
    assert recorder.open
    with pytest.raises(RuntimeError, match="already prompted"):
        recorder.prompt(PROMPT)
    with pytest.raises(ValueError, match="cancelled by 'user'"):
        recorder.cancelled("user")
    assert recorder.answer({"stopReason": "end_turn"})[-1] == (
        "turn/end", {"turn": 3, "reason": {"kind": "completed"}})
    assert not recorder.open
    # The first end wins; later ones record nothing; updates now stand between turns.
    assert recorder.cancelled("session/cancel") == []
    assert recorder.failed({"code": 1, "message": "late"}) == []
    assert recorder.answer({"stopReason": "end_turn"}) == []
    assert recorder.permission(asked("c1"), ALLOW) == []
    assert recorder.update(text("late")) == [("wrapped/update", {"update": text("late")})]
    # Not a SessionUpdate at all: nothing to record (the log would refuse it).
    assert recorder.update({"content": "x"}) == []


def test_a_session_of_turns_with_updates_between_them() -> None:
    first = TurnRecorder(1, agent="a")
    items: list[Item] = [wrapped_update({"sessionUpdate": "available_commands_update", "availableCommands": []})]
    items += first.prompt(PROMPT) + first.update(text("hi")) + first.answer({"stopReason": "end_turn"})
    items += first.update(PLAN)  # late: between turns
    second = TurnRecorder(2, agent="a")
    items += second.prompt(PROMPT) + second.update(call("c1")) + second.update(done("c1"))
    items += second.answer({"stopReason": "end_turn"})
    events = logged(items)
    # Between turns they name none; the call's updates name their turn.
    assert [e["data"].get("turn") for e in events if e["type"] == "wrapped/update"] == [None, None, 2, 2]


@pytest.mark.parametrize(("error", "code", "sent"), [
    ({"code": -32602, "message": "bad"}, "invalid_params", None),
    ({"code": -32800, "message": "cancelled"}, "cancelled", None),
    ({"code": 4242, "message": "odd"}, "agent_error", None),
    # Not an error object as it stands: kept as the editor is answered with it.
    ({"code": "x", "message": 7, "data": {"code": 9, "retryable": "yes"}}, "internal_error",
     {"code": -32603, "message": "7", "data": {"code": 9, "retryable": "yes"}}),
    ({"message": "", "data": None, "trace": "at x"}, "internal_error", {"code": -32603, "message": "", "data": None}),
])
def test_error_codes_are_stable_words(error: dict[str, Any], code: str, sent: dict[str, Any] | None) -> None:
    items = record([("failed", error)])
    why = items[-1][1]["reason"]
    assert why["code"] == code
    assert set(why) == {"kind", "step", "message", "code", "agentError"}
    assert list(why["agentError"].items()) == list((sent or error).items())
    assert why["message"] == ((sent or error)["message"] or "the wrapped agent failed (-32603)")
    logged(items)


def test_a_crash_of_the_agent_mid_turn_is_closed_by_the_repair_closers() -> None:
    # The proxy's part (docs/wrap.md): it closes the open turn with close_interrupted.
    recorder = TurnRecorder(1, agent="a")
    items = recorder.prompt(PROMPT) + recorder.update(text("a")) + recorder.update(call("c1"))
    items += recorder.update(PLAN) + recorder.known_calls()  # the proxy writes what the step said, then closes
    assert [t for t, _ in items[-2:]] == ["assistant/message", "tool/call"]
    store = SessionStore(MemoryBackend())
    log = store.create(cwd="/w")
    write(log, items)
    closers = log.close_interrupted(cause="crash")
    assert [c["type"] for c in closers] == ["tool/result", "step/end", "turn/end"]
    assert "may have run" in closers[0]["data"]["content"][0]["text"]
    check_invariants(list(log.events), closed=True)
    log.close()


@settings(max_examples=200, deadline=None)
@given(error=st.one_of(json_values(), st.fixed_dictionaries({}, optional={
    "code": st.one_of(st.integers(-(2**40), 2**40), json_values(2)), "message": json_values(2),
    "data": json_values(), "extra": json_values(2)})))
def test_any_error_answer_is_recorded_and_answered_again(error: Any) -> None:
    """Whatever a child sends as its error (untrusted), the turn is recorded within the
    invariants and the settled answer is a valid JSON-RPC error: the agent's own, changed
    only where it is not one (acp_bridge.rpc.protocol.error_object)."""
    items = record([("failed", error)])
    logged(items)
    sent = items[-1][1]["reason"]["agentError"]
    assert sent == error_object(error) and error_object(sent) == sent  # the rule is stable
    with pytest.raises(TurnFailedError) as raised:
        answer_of(TurnEnd({"type": "turn/end", "seq": 2, "time": 0, "data": dict(items[-1][1])}))
    answer = to_rpc_error(raised.value).to_json()
    assert answer == sent
    validate_def("Error", answer)
    if isinstance(error, dict) and type(error.get("code")) is int and -(2**31) <= error["code"] < 2**31 \
            and isinstance(error.get("message"), str):
        assert answer == {k: v for k, v in error.items() if k != "extra"}  # a valid one: as it came
