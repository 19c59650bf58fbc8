"""The model side of the recorded snapshot fixtures in tests/recorded/: what the loopback
OpenAI-compatible server (tests/support/sse_server.py) streams for each scenario when it
is recorded. No real key is reachable here, so our fixtures are recorded against it;
`acp-bridge snapshot record` against a real provider works the same way.

Record them again (after a change that is meant to alter the traffic):

    .venv/bin/python -m tests.support.recorded_scenarios [NAME...]

Scenarios in DERIVED reuse another scenario's recording with an overrides file; their
goldens are written by a replay (`snapshot check --update`).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from acp_bridge.snapshot import check, load_scenario, record
from tests.support.sse_server import (
    Reply,
    SSEServer,
    chunk,
    error_reply,
    stream_reply,
    text_reply,
    usage_chunk,
)

RECORDED = Path(__file__).resolve().parents[1] / "recorded"
MODEL = "openai:test-model"


def tool_reply(*calls: tuple[str, str, str], text: str = "", usage: tuple[int, int] = (20, 8)) -> Reply:
    """One streamed step that asks for tools: (id, name, arguments JSON) each, the
    arguments split over two deltas as providers send them."""
    payloads: list[dict[str, Any]] = [chunk({"role": "assistant", "content": text or None})]
    for index, (call_id, name, arguments) in enumerate(calls):
        half = len(arguments) // 2
        payloads.append(chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                               "function": {"name": name, "arguments": arguments[:half]}}]}))
        payloads.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]}))
    payloads += [chunk({}, "tool_calls"), usage_chunk(*usage)]
    return stream_reply(*payloads)


def thinking_reply(thoughts: list[str], pieces: list[str]) -> Reply:
    payloads = [chunk({"role": "assistant", "content": None, "reasoning_content": ""})]
    payloads += [chunk({"content": None, "reasoning_content": t}) for t in thoughts]
    payloads += [chunk({"content": p}) for p in pieces]
    payloads += [chunk({}, "stop"), usage_chunk(12, 9, reasoning=4)]
    return stream_reply(*payloads)


def hanging_reply(*pieces: str) -> Reply:
    """Streams `pieces`, then keeps the response open until the agent lets go (a cancel)."""
    payloads = [chunk({"role": "assistant", "content": ""}), *(chunk({"content": p}) for p in pieces)]
    return stream_reply(*payloads, done=False, hang=True)


REPLIES: dict[str, list[Reply]] = {
    "handshake": [],
    "text_turn": [thinking_reply(["The user ", "greets me."], ["Hello", " there", "!"])],
    "tool_call_permission": [
        tool_reply(("call_read", "read_file", '{"path": "notes.txt"}'), text="Let me look."),
        tool_reply(("call_write", "write_file", '{"path": "notes.txt", "content": "one\\ntwo\\n"}')),
        tool_reply(("call_rm", "run_command", '{"command": "rm notes.txt"}')),
        text_reply("I added a line", "; removing the file was refused."),
    ],
    "multi_turn": [
        text_reply("My name is", " Replay."),
        text_reply("You asked", " my name."),
        tool_reply(("call_ls", "list_dir", '{"path": "."}')),
        text_reply("There is one file."),
    ],
    "error_finish": [
        error_reply(400, "This model's maximum context length is 8 tokens", code="context_length_exceeded"),
        text_reply("Still here."),
    ],
    "cancel": [
        hanging_reply("Counting:", " one,"),
        tool_reply(("call_edit", "write_file", '{"path": "out.txt", "content": "x"}')),
        text_reply("Stopped", " as asked."),
    ],
    "client_terminal": [
        tool_reply(("call_wc", "run_command", '{"command": "wc -l < notes.txt && pwd"}')),
        text_reply("notes.txt has", " two lines."),
    ],
    "model_switch": [
        text_reply("Fast", " answer."),
        thinking_reply(["Thinking ", "hard."], ["Strong", " answer."]),
        text_reply("Fast", " again."),
    ],
    "load_after_restart": [
        tool_reply(("call_ls", "list_dir", '{"path": "."}')),
        text_reply("One file:", " notes.txt."),
    ],
}

# name -> (the scenario whose recording it replays with its overrides file)
DERIVED = {"override_error": "text_turn", "override_hang": "text_turn"}
# Recorded through `acp-bridge wrap` in front of the agent their scenario names.
WRAPPED = ("wrap_turns",)


def record_all(names: list[str], root: Path = RECORDED) -> None:
    """Record the scenarios `names` under `root` (their folders must be there)."""
    for name in names:
        if name in WRAPPED:
            record(root / name)
            print(f"recorded {name} (wrapped)")
        if name in DERIVED or name in WRAPPED:
            continue
        with SSEServer() as server:
            server.push(*REPLIES[name])
            env = dict(os.environ, OPENAI_BASE_URL=server.url, OPENAI_API_KEY="sk-loopback-test",
                       ACP_BRIDGE_OPENAI_ATTEMPTS="1")
            # The scenario's own models (several for a model switch), else MODEL.
            own = load_scenario(root / name).model
            record(root / name, model=None if own else MODEL, environ=env)
        print(f"recorded {name}")
    for name, source in DERIVED.items():
        if name in names or source in names:
            shutil.copyfile(root / source / "session.jsonl", root / name / "session.jsonl")
            check(root / name, update=True)
            print(f"replayed {name} (from {source}, with overrides)")


if __name__ == "__main__":
    record_all(sys.argv[1:] or [*REPLIES, *DERIVED, *WRAPPED])
