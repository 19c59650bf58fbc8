"""Shared by the tests of a cancel and a permission answer read together, for our agent
(tests/test_e2e_permission_flow.py) and through the wrapper (tests/test_wrap_cancel.py):
the script that asks for permission once per round, and the shape of one round's wire.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.acp_client import ClientPolicy, write_script


def permission_rounds_script(path: Path, rounds: int) -> str:
    """A `script:` model that writes a file (so asks for permission) once per round."""
    steps = [{"toolCalls": [{"id": f"w{n}", "name": "write_file",
                             "arguments": {"path": "out.txt", "content": "hi\n"}}]} for n in range(rounds)]
    return write_script(path, *steps)


def asked_times(policy: ClientPolicy, count: int) -> Callable[[], bool]:
    return lambda: len(policy.asked) == count


def wire_shape(messages: list[Any], *, drop_meta: bool = False) -> list[Any]:
    """What was sent to the client in one round, ids and per-turn values left out (with
    `drop_meta`, the updates' whole `_meta`; else only its turn number)."""
    shape: list[Any] = []
    for message in messages:
        if message.get("method") == "session/update":
            update = dict(message["params"]["update"])
            for varying in ("toolCallId", "rawInput", "messageId", *(("_meta",) if drop_meta else ())):
                update.pop(varying, None)
            update.get("_meta", {}).get("acpBridge", {}).pop("turn", None)
            shape.append(update)
        elif "method" in message:
            shape.append({"method": message["method"]})
        else:  # the prompt's answer: checked round by round
            shape.append({"answer": message.get("result", {}).get("stopReason")})
    return shape
