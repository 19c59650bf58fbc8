"""A raw ACP agent that plays a recording of a real agent back (tests/wrapped_agents/,
made by tests/support/record_agent.py), for the offline fidelity tests of `acp-bridge
wrap` (tests/test_wrap_fidelity.py).

    python -m tests.support.replay_child FIXTURE

The recording is the agent's side of one conversation, in the order the messages
passed. Each message the client sent there is waited for here (a request or
notification: the next one recorded, by its method; an answer to the agent's own
request: by that request's id); then what the agent sent next goes out, up to the next
message of the client, with the recorded request ids swapped for the ones the client
uses now. A message that is not the next one recorded gets a plain answer (`initialize`
the recorded one; `session/load`, `session/resume`, `session/close`: {}; others -32601),
so a wrapper may restart or restore it. Nothing else: no timing, no model.
"""

from __future__ import annotations

import sys
from typing import Any

import orjson

PLAIN: dict[str, dict[str, Any]] = {"session/load": {}, "session/resume": {}, "session/close": {}, "session/set_mode": {}}


def main(path: str) -> int:
    with open(path, "rb") as recording:
        script = [orjson.loads(line) for line in recording if line.strip()]
    initialize = next(e["msg"] for e in script if e["from"] == "agent" and e["msg"].get("id") == 1)
    ids: dict[Any, Any] = {}  # recorded id of a client request -> the id it has now
    at = 0

    def send(msg: dict[str, Any]) -> None:
        sys.stdout.buffer.write(orjson.dumps(msg) + b"\n")
        sys.stdout.buffer.flush()

    def play() -> None:  # what the agent said until the client speaks again
        nonlocal at
        while at < len(script) and script[at]["from"] == "agent":
            msg = dict(script[at]["msg"])
            if "method" not in msg and "id" in msg:  # an answer to the client
                msg["id"] = ids.get(msg["id"], msg["id"])
            send(msg)
            at += 1

    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        msg = orjson.loads(line)
        expected = script[at]["msg"] if at < len(script) else None
        if expected is not None and _matches(expected, msg):
            if "method" in expected and "id" in expected:
                ids[expected["id"]] = msg["id"]
            at += 1
            play()
        elif "method" in msg and "id" in msg:
            if msg["method"] == "initialize":
                send({**initialize, "id": msg["id"]})
            elif msg["method"] in PLAIN:
                send({"jsonrpc": "2.0", "id": msg["id"], "result": PLAIN[msg["method"]]})
            else:
                send({"jsonrpc": "2.0", "id": msg["id"],
                      "error": {"code": -32601, "message": f"not in the recording: {msg['method']}"}})
    return 0


def _matches(expected: dict[str, Any], msg: dict[str, Any]) -> bool:
    if "method" in expected:
        return msg.get("method") == expected["method"] and ("id" in msg) == ("id" in expected)
    return "method" not in msg and msg.get("id") == expected.get("id")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
