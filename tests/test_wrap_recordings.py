"""What the wrapper records of real agents, pure: the recordings of codex-acp, qwen-code,
opencode and gemini-cli talking to a client (tests/wrapped_agents/, made by
tests/support/record_agent.py against the fake model) fed through `TurnRecorder` as the
wrapper feeds it (each prompt, the agent's updates, each permission request before it
goes on and its answer, the agent's answer), and the mode a child's answer gives read
as the wrapper reads it. Each row names what an agent said and what the log must hold
of it (issue 35, point 6); tests/test_wrap_fidelity.py plays the same recordings
through a real wrapper."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_bridge.wrap.record import TurnRecorder
from acp_bridge.wrap.sessions import mode_of
from session import check_invariants
from session.items import Item
from tests.support.record_agent import NOTES

RECORDINGS = Path(__file__).parent / "wrapped_agents"
ALL = sorted(p.stem for p in RECORDINGS.glob("*.jsonl"))


def entries(name: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (RECORDINGS / f"{name}.jsonl").read_bytes().splitlines() if line.strip()]


def recorded_turns(name: str) -> list[list[Item]]:
    """Each prompt turn of the recording `name`, as the items the wrapper's recorder
    makes of it (checked against the log's invariants, every turn closed)."""
    script = entries(name)
    prompts = {e["msg"]["id"] for e in script if e["from"] == "client" and e["msg"].get("method") == "session/prompt"}
    asked: dict[Any, dict[str, Any]] = {}  # the agent's permission requests, by id: their toolCall
    turns: list[list[Item]] = []
    recorder: TurnRecorder | None = None
    for entry in script:
        msg = entry["msg"]
        if entry["from"] == "client" and msg.get("method") == "session/prompt":
            recorder = TurnRecorder(len(turns) + 1, agent="wrap:agent")
            turns.append(recorder.prompt(msg["params"]["prompt"]))
        elif recorder is None or not recorder.open:
            continue
        elif entry["from"] == "agent" and msg.get("method") == "session/update":
            turns[-1] += recorder.update(msg["params"]["update"])
        elif entry["from"] == "agent" and msg.get("method") == "session/request_permission":
            asked[msg["id"]] = msg["params"]["toolCall"]
            turns[-1] += recorder.asking(msg["params"]["toolCall"])
        elif entry["from"] == "client" and msg.get("id") in asked and isinstance(msg.get("result"), dict):
            turns[-1] += recorder.permission(asked.pop(msg["id"]), msg["result"]["outcome"])
        elif entry["from"] == "agent" and msg.get("id") in prompts and "method" not in msg:
            turns[-1] += recorder.answer(msg["result"])
    items = [item for turn in turns for item in turn]
    check_invariants([{"type": t, "seq": i, "time": i, "data": dict(d)} for i, (t, d) in enumerate(items)],
                     closed=True)
    return turns


def of_type(items: list[Item], kind: str) -> list[dict[str, Any]]:
    return [dict(d) for t, d in items if t == kind]


def texts(result: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in result["content"])


# --- results from rawOutput --------------------------------------------------------------

# (recording, turn, the call's title, its result's text): codex-acp (full-access: no
# sandbox to fail) gives a command's output only in its final update's `rawOutput`.
RAW_OUTPUT = [
    ("codex-acp-0.16.0-full-access", 2, "touch made.txt", ""),
    ("codex-acp-0.16.0-full-access", 3, "Read notes.txt", NOTES),
    # Where the agent gives content, the result is its content (rawOutput unused).
    ("qwen-code-0.24.4", 3, "Shell: cat notes.txt", "Command: cat notes.txt\nDirectory: (root)\nOutput: " + NOTES
     + "Error: (none)\nExit Code: 0\nSignal: (none)\nProcess Group PGID: 19251"),
    ("opencode-1.18.33-ask", 3, "cat notes.txt", NOTES),
]


@pytest.mark.parametrize(("name", "turn", "title", "said"), RAW_OUTPUT, ids=[f"{r[0]}-{r[1]}" for r in RAW_OUTPUT])
def test_a_result_is_what_the_agent_gave_its_content_else_its_raw_output(
        name: str, turn: int, title: str, said: str) -> None:
    items = recorded_turns(name)[turn - 1]
    [call] = of_type(items, "tool/call")
    [result] = of_type(items, "tool/result")
    assert (call["title"], result["isError"]) == (title, False)
    assert texts(result) == said


# --- a call's title and arguments, the permission request included ------------------------


@pytest.mark.parametrize("name", ALL)
def test_a_call_asked_about_is_recorded_as_the_request_describes_it(name: str) -> None:
    """qwen-code 0.24.4 announces `Shell {}` and opencode `bash {cwd}`, then ask about
    the command: the request's title and input are the agent's latest word on the call
    when it goes to the editor, and its `tool/call` is written then."""
    script = entries(name)
    requests = [e["msg"]["params"]["toolCall"] for e in script
                if e["from"] == "agent" and e["msg"].get("method") == "session/request_permission"]
    calls = [of_type(turn, "tool/call") for turn in recorded_turns(name)]
    # A call id may come again in a later turn (the agents number calls per turn):
    # each request is matched with the calls in the order asked.
    logged = [c for turn in calls for c in turn]
    for request in requests:
        call = next(c for c in logged if c["callId"] == request["toolCallId"])
        logged.remove(call)
        assert (call["title"], call["arguments"]) == (request["title"], request.get("rawInput") or {})


# (recording, turn, title, arguments) of the calls that were placeholders on main.
ASKED = [
    ("qwen-code-0.24.4", 2, "touch made.txt", {"command": "touch made.txt"}),
    ("opencode-1.18.33-ask", 3, "cat notes.txt", {"command": "cat notes.txt"}),
]


@pytest.mark.parametrize(("name", "turn", "title", "arguments"), ASKED, ids=[f"{r[0]}-{r[1]}" for r in ASKED])
def test_no_placeholder_is_recorded_for_a_call_asked_about(
        name: str, turn: int, title: str, arguments: dict[str, Any]) -> None:
    items = recorded_turns(name)[turn - 1]
    [call] = of_type(items, "tool/call")
    blocks = [b for m in of_type(items, "assistant/message") for b in m["content"] if b["type"] == "tool-call"]
    assert (call["title"], call["name"], call["arguments"]) == (title, title, arguments)
    assert blocks == [{"type": "tool-call", "id": call["callId"], "name": title,
                       "arguments": orjson.dumps(arguments).decode()}]


# --- usage: only what the agent said --------------------------------------------------------

# (recording, the turns' usage as recorded): codex-acp says how full its context is
# (`usage_update`) and never what a turn cost; opencode answers `usage`, gemini-cli its
# `_meta.quota.token_count`.
USAGE = [
    ("codex-acp-0.16.0", [None, None, None]),
    ("codex-acp-0.16.0-full-access", [None, None, None]),
    ("opencode-1.18.33", [{"inputTokens": 120, "outputTokens": 9}] * 3),
    ("gemini-cli-0.61.0", [{"inputTokens": 120, "outputTokens": 9}, {"inputTokens": 240, "outputTokens": 30},
                           {"inputTokens": 240, "outputTokens": 30}]),
]


@pytest.mark.parametrize(("name", "usage"), USAGE, ids=[r[0] for r in USAGE])
def test_a_turn_has_the_usage_the_agent_said_and_no_other(name: str, usage: list[dict[str, int] | None]) -> None:
    got = []
    for turn in recorded_turns(name):
        said = [m["usage"] for m in of_type(turn, "assistant/message") if "usage" in m]
        assert len(said) <= 1
        got.append(said[0] if said else None)
    assert got == usage


# --- the child's mode -----------------------------------------------------------------------

MODES = [
    ("codex-acp-0.16.0", "read-only"),  # modes and a config option of category mode
    ("qwen-code-0.24.4", "auto"),  # modes
    ("opencode-1.18.33", "build"),  # only a config option of category mode
    ("opencode-1.18.33-ask", "build"),
    ("gemini-cli-0.61.0", "default"),
]


@pytest.mark.parametrize(("name", "mode"), MODES, ids=[r[0] for r in MODES])
def test_the_child_s_starting_mode_is_read_from_its_session_new_answer(name: str, mode: str) -> None:
    new = next(e["msg"]["result"] for e in entries(name) if e["from"] == "agent"
               and isinstance(e["msg"].get("result"), dict) and "sessionId" in e["msg"]["result"])
    assert mode_of(new) == mode


def test_a_config_option_update_gives_the_mode_of_its_mode_option() -> None:
    options = [{"id": "model", "category": "model", "currentValue": "m"},
               {"id": "mode", "category": "mode", "currentValue": "plan"}]
    assert mode_of({"sessionUpdate": "config_option_update", "configOptions": options}) == "plan"
    assert mode_of({"sessionUpdate": "config_option_update", "configOptions": options[:1]}) is None
    assert mode_of({"modes": {"currentModeId": "ask"}, "configOptions": options}) == "ask"
