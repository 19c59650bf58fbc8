"""A raw ACP agent whose answer shows everything it was shown, for tests/test_wrap_switch.py
(`wrap --agent`: a session handed to another agent must reach it with the conversation).

    python tests/support/memory_agent.py NAME [--record FILE] [--model-option] [--agent-option] [--no-close]
        [--commands [--agent-command]]

Each prompt is answered with one chunk, `NAME saw: ` and the text of every prompt of the
session so far (the wrapper's seed included), joined by ` | `, then `end_turn`; a prompt
`sleep MS` waits MS milliseconds first; a prompt `elicit-url` asks the editor a URL
elicitation (`elicitation/create`, id `page-1`), then on its answer sends
`elicitation/complete` and answers with the editor's answer. `agentInfo.name` is NAME. `--model-option`
offers a config option `model` (category `model`) of its own, `--agent-option` one with
the id `agent`: the wrapper's option must not hide them (a `set_config_option` of them is
also told as a `config_option_update`). `--record FILE` appends every
message it reads (one JSON line each), `--no-close` leaves `session/close` out of its
capabilities, `--commands` offers slash commands of its own (`fork` among them) after
each `session/new` answer, `--agent-command` one named `agent` too. Plain JSON-RPC over
stdio, standard library only: it starts fast.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.raw_agent import messages, prompt_text, record, send

IDS = itertools.count(1)
# `--commands`: its own slash commands, one of them named as one of the wrapper's.
COMMANDS = [{"name": "fork", "description": "the memory agent's own fork"},
            {"name": "recall", "description": "say what it saw", "input": {"hint": "anything"}}]
AGENT_COMMAND = {"name": "agent", "description": "the memory agent's own agent command"}


def options(flags: list[str], model: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if "--model-option" in flags:
        out.append({"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": model,
                    "options": [{"value": "small", "name": "Small"}, {"value": "large", "name": "Large"}]})
    if "--agent-option" in flags:
        out.append({"id": "agent", "name": "Persona", "type": "select", "currentValue": "plain",
                    "options": [{"value": "plain", "name": "Plain"}, {"value": "pirate", "name": "Pirate"}]})
    return out


def answer(rid: Any, sid: str, name: str, seen: list[str], delay_ms: int) -> None:
    time.sleep(delay_ms / 1000)  # a slow answer, as asked (`sleep MS`): what the tests need
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": f"{name} saw: " + " | ".join(seen)}}}})
    send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})


def main() -> None:
    name, flags = sys.argv[1], sys.argv[2:]
    path = flags[flags.index("--record") + 1] if "--record" in flags else None
    sessions: dict[str, list[str]] = {}
    models: dict[str, str] = {}
    asked: dict[str, tuple[Any, str]] = {}  # `elicit-url`: our request's id -> the prompt's id, session
    for message in messages():
        if path is not None:
            record(path, {"agent": name, **message})
        method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method is None:
            waiting = asked.pop(str(rid), None)
            if waiting is not None:  # the editor's answer to `elicit-url`: done on the page
                prompt_id, sid = waiting
                send({"jsonrpc": "2.0", "method": "elicitation/complete", "params": {"elicitationId": "page-1"}})
                answer(prompt_id, sid, name, [json.dumps(message.get("result"))], 0)
            continue
        if method == "initialize":
            caps: dict[str, Any] = {"sessionCapabilities": {} if "--no-close" in flags else {"close": {}}}
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": 1, "agentCapabilities": caps, "authMethods": [],
                "agentInfo": {"name": name, "version": "1.0"}}})
        elif method == "session/new":
            sid = f"{name}-{next(IDS)}"
            sessions[sid], models[sid] = [], "small"
            result: dict[str, Any] = {"sessionId": sid}
            if options(flags, "small"):
                result["configOptions"] = options(flags, "small")
            send({"jsonrpc": "2.0", "id": rid, "result": result})
            if "--commands" in flags:  # after the answer, as our own agent offers its commands
                send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": {
                    "sessionUpdate": "available_commands_update",
                    "availableCommands": [*COMMANDS, *([AGENT_COMMAND] if "--agent-command" in flags else [])]}}})
        elif method == "session/prompt":
            sid = params["sessionId"]
            text = prompt_text(params)
            seen = sessions.setdefault(sid, [])
            seen.append(text)
            if text == "elicit-url":
                asked[f"ask-{rid}"] = (rid, sid)
                send({"jsonrpc": "2.0", "id": f"ask-{rid}", "method": "elicitation/create", "params": {
                    "sessionId": sid, "mode": "url", "message": "Sign in", "url": "https://example.invalid/in",
                    "elicitationId": "page-1"}})
                continue
            delay = int(text.split()[1]) if text.startswith("sleep ") else 0
            threading.Thread(target=answer, args=(rid, sid, name, list(seen), delay), daemon=True).start()
        elif method == "session/set_config_option":
            models[params["sessionId"]] = params["value"]
            send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": params["sessionId"], "update": {
                "sessionUpdate": "config_option_update", "configOptions": options(flags, params["value"])}}})
            send({"jsonrpc": "2.0", "id": rid, "result": {"configOptions": options(flags, params["value"])}})
        elif method == "session/close":
            sessions.pop(str(params.get("sessionId")), None)
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif method == "session/cancel":
            continue
        elif rid is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    main()
